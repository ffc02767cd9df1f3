//! PostgreSQL from Debian on a cairn filesystem mounted through the kernel's FUSE (issue 15's
//! acceptance for a real program): `initdb` onto the mount, `pgbench -i -s 10`, 60 s of
//! pgbench, then SIGKILL of `cairn serve` during a second run. After import, replay and a new
//! mount, PostgreSQL must recover and start, `pg_amcheck` must find nothing, and every commit
//! pgbench saw acknowledged must be there.
//!
//! What makes it fail when data is damaged or lost:
//! - the cluster has data checksums (`initdb -k`): a page that is not what PostgreSQL wrote
//!   fails its checksum when read (during recovery, by `pg_amcheck`, or by the queries below);
//! - `pg_amcheck --heapallindexed --rootdescend` checks every heap page and B-tree of every
//!   database, and that each heap tuple is in its indexes; after a clean stop at the end,
//!   `pg_checksums --check` reads every page of every relation file;
//! - PostgreSQL's log from the restart on holds no ERROR or PANIC (an EIO from the mount would);
//! - pgbench's TPC-B-like transaction adds the same delta to one account, one teller, one
//!   branch and appends it to the history, all at once, from all-zero balances: the four sums
//!   are equal in any state that holds whole transactions only;
//! - the second run does not truncate the history (`-n`), so the history holds every committed
//!   transaction of both runs: at least the number pgbench counted as done (each one
//!   acknowledged after the WAL's fdatasync through cairn's intent log), and at most that plus
//!   one in flight per client. With `sync=disabled` (fsync acknowledged without the log) the
//!   pool comes back as of its last txg, PostgreSQL recovers it without complaint, and this
//!   count is what catches the loss.
//!
//! Needs root (mounting; PostgreSQL itself runs as the `postgres` user, which the Debian
//! package creates), /dev/fuse, and `postgresql-15` plus `postgresql-client-15` (`.ci/run`
//! installs them; this test fails, never skips, without them).

// A test is one scenario read top to bottom: split into helpers, it reads worse.
#![allow(clippy::too_many_lines)]

mod nbd_common;

use nbd_common::*;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where Debian installs PostgreSQL 15's programs.
const PG_BIN: &str = "/usr/lib/postgresql/15/bin";
/// pgbench's scale: 100,000 accounts, 10 tellers and 1 branch per unit.
const SCALE: u64 = 10;
/// pgbench clients (each at most one transaction in flight).
const CLIENTS: u64 = 4;
/// The measured run.
const RUN_SECS: u64 = 60;
/// How long the second run goes before cairn is killed.
const KILL_AFTER: Duration = Duration::from_secs(8);
/// The port only names the socket file in the test's own directory: no clash with others.
const PORT: &str = "5432";

fn pg_program(name: &str) -> PathBuf {
    let path = Path::new(PG_BIN).join(name);
    assert!(
        path.exists(),
        "{} is missing: apt-get install postgresql-15 postgresql-client-15 (.ci/run does it); \
         this test does not skip",
        path.display()
    );
    path
}

/// The `postgres` user's uid and gid.
fn postgres_ids() -> (u32, u32) {
    let id = |flag: &str| -> u32 {
        let out = Command::new("id")
            .args([flag, "postgres"])
            .output()
            .expect("run id");
        assert!(
            out.status.success(),
            "no user postgres: apt-get install postgresql-15 creates it"
        );
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("a numeric id")
    };
    (id("-u"), id("-g"))
}

/// One PostgreSQL cluster on the mount, run as `postgres`.
struct Cluster {
    uid: u32,
    gid: u32,
    data: PathBuf,
    socket_dir: PathBuf,
    log: PathBuf,
    postmaster: Option<Child>,
}

impl Cluster {
    /// A command for a PostgreSQL program, run as `postgres` in the socket directory.
    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(pg_program(program));
        cmd.uid(self.uid)
            .gid(self.gid)
            .current_dir(&self.socket_dir)
            .env("HOME", &self.socket_dir)
            .env("PGHOST", &self.socket_dir)
            .env("PGPORT", PORT)
            .env("PGUSER", "postgres")
            .env("PGDATABASE", "postgres")
            .env_remove("PGPASSWORD")
            .env_remove("PGSERVICE");
        cmd
    }

    /// Runs a client program that must succeed; returns its stdout and stderr.
    fn run_ok(&self, program: &str, args: &[&str], limit: Duration) -> Run {
        let mut cmd = self.command(program);
        cmd.args(args);
        run_limited(&mut cmd, limit).ok()
    }

    /// One value from a query.
    fn query(&self, sql: &str) -> String {
        let run = self.run_ok(
            "psql",
            &["-X", "-v", "ON_ERROR_STOP=1", "-Atc", sql],
            TOOL_TIME,
        );
        run.stdout.trim().to_string()
    }

    fn query_i64(&self, sql: &str) -> i64 {
        let value = self.query(sql);
        value
            .parse()
            .unwrap_or_else(|_| panic!("{sql}: not a number: {value:?}"))
    }

    /// Starts the postmaster (its own process group, so its backends can be killed with it)
    /// and waits until it accepts connections (crash recovery included).
    fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("postgres log file");
        let mut cmd = self.command("postgres");
        cmd.arg("-D")
            .arg(&self.data)
            .args(["-p", PORT, "-c", "listen_addresses="])
            .arg("-c")
            .arg(format!(
                "unix_socket_directories={}",
                self.socket_dir.display()
            ))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .process_group(0);
        self.postmaster = Some(cmd.spawn().expect("start postgres"));
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let ready = self
                .command("pg_isready")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|status| status.success());
            if ready {
                return;
            }
            if let Some(status) = self.postmaster.as_mut().and_then(|p| p.try_wait().ok()?) {
                panic!("postgres exited ({status}) at start:\n{}", self.logs());
            }
            assert!(
                Instant::now() < deadline,
                "postgres did not accept connections within 180 s:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// SIGKILL of the postmaster and every backend (its process group).
    fn kill(&mut self) {
        if let Some(mut child) = self.postmaster.take() {
            // SAFETY: kill(2) on the process group our own child leads.
            unsafe {
                libc::kill(-(child.id() as i32), libc::SIGKILL);
            }
            let _ = child.wait();
        }
    }

    /// A fast shutdown (SIGINT): PostgreSQL checkpoints and exits.
    fn stop(&mut self) {
        let Some(mut child) = self.postmaster.take() else {
            return;
        };
        // SAFETY: kill(2) on our own child, not yet waited for.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGINT);
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(status) = child.try_wait().expect("wait for postgres") {
                assert!(
                    status.success(),
                    "postgres shutdown: {status}\n{}",
                    self.logs()
                );
                return;
            }
            if Instant::now() > deadline {
                self.postmaster = Some(child);
                self.kill();
                panic!("postgres did not shut down:\n{}", self.logs());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn logs(&self) -> String {
        format!(
            "--- postgres log ({}) ---\n{}",
            self.log.display(),
            std::fs::read_to_string(&self.log).unwrap_or_default()
        )
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.kill();
    }
}

/// pgbench's count of transactions done ("number of transactions actually processed: N"),
/// printed also when a run is aborted.
fn processed(output: &str) -> Option<u64> {
    output
        .lines()
        .find_map(|line| line.strip_prefix("number of transactions actually processed: "))
        .and_then(|rest| rest.split(['/', ' ']).next())
        .and_then(|n| n.trim().parse().ok())
}

fn tps(output: &str) -> Option<f64> {
    output
        .lines()
        .find_map(|line| line.strip_prefix("tps = "))
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
}

#[test]
fn postgres_survives_sigkill_of_cairn_during_pgbench() {
    let _heavy = heavy();
    let (uid, gid) = postgres_ids();
    let env = Env::new();
    // PostgreSQL runs as another user: it must reach the mount and its socket directory.
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(env.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    env.create_pool_of("4G");
    // As a user would set up a database dataset: records of PostgreSQL's page size.
    env.ok(&["create", "-o", "recordsize=8K", "tank/pg"]);
    let sync = env.ok(&["get", "-H", "-o", "value", "sync", "tank/pg"]);
    assert_eq!(sync.trim(), "standard");
    let at = env.path("mnt");
    let _cleanup = Unmount(at.clone());
    let mut server = env.serve();
    env.ok(&["mount", "tank/pg", at.to_str().unwrap()]);

    let socket_dir = env.path("pgsock");
    std::fs::create_dir(&socket_dir).unwrap();
    std::os::unix::fs::chown(&socket_dir, Some(uid), Some(gid)).unwrap();
    let data = at.join("data");
    std::fs::create_dir(&data).unwrap();
    std::os::unix::fs::chown(&data, Some(uid), Some(gid)).unwrap();
    let mut cluster = Cluster {
        uid,
        gid,
        data: data.clone(),
        socket_dir: socket_dir.clone(),
        log: socket_dir.join("postgres.log"),
        postmaster: None,
    };
    // Default settings (fsync=on, full_page_writes=on, synchronous_commit=on), plus page
    // checksums so that damage is seen.
    let started = Instant::now();
    cluster.run_ok(
        "initdb",
        &[
            "-D",
            data.to_str().unwrap(),
            "-A",
            "trust",
            "-U",
            "postgres",
            "--data-checksums",
            "--no-instructions",
        ],
        Duration::from_secs(300),
    );
    let initdb_took = started.elapsed();
    cluster.start();
    assert_eq!(cluster.query("SHOW fsync"), "on");
    assert_eq!(cluster.query("SHOW full_page_writes"), "on");
    assert_eq!(cluster.query("SHOW data_checksums"), "on");

    let started = Instant::now();
    let scale = SCALE.to_string();
    cluster.run_ok(
        "pgbench",
        &["-i", "-s", &scale, "-q"],
        Duration::from_secs(600),
    );
    let init_took = started.elapsed();
    let clients = CLIENTS.to_string();
    let run_secs = RUN_SECS.to_string();
    let first = cluster.run_ok(
        "pgbench",
        &["-c", &clients, "-j", "2", "-T", &run_secs],
        Duration::from_secs(RUN_SECS + 300),
    );
    let first_done = processed(&first.stdout)
        .unwrap_or_else(|| panic!("no transaction count:\n{}", first.describe()));
    let first_tps = tps(&first.stdout).unwrap_or(0.0);
    eprintln!(
        "postgres on cairn: initdb {:.1} s, pgbench -i -s {SCALE} {:.1} s, {RUN_SECS} s with \
         {CLIENTS} clients: {first_done} transactions, {first_tps:.0} tps",
        initdb_took.as_secs_f64(),
        init_took.as_secs_f64()
    );
    assert!(first_done > 0, "{}", first.describe());

    // The second run (history kept), killed under way: cairn first, then what is left of
    // PostgreSQL (its backends fail on the dead mount).
    let second_log = env.path("pgbench-second.out");
    let second_file = std::fs::File::create(&second_log).unwrap();
    let mut second = cluster.command("pgbench");
    second
        .args(["-n", "-c", &clients, "-j", "2", "-T", "600"])
        .stdin(Stdio::null())
        .stdout(second_file.try_clone().unwrap())
        .stderr(second_file);
    let mut second = second.spawn().expect("start pgbench");
    std::thread::sleep(KILL_AFTER);
    server.signal(libc::SIGKILL);
    // pgbench ends when PostgreSQL's backends fail on the dead mount; kill what is left of
    // PostgreSQL if it takes long.
    let deadline = Instant::now() + Duration::from_secs(60);
    while second.try_wait().expect("wait for pgbench").is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    cluster.kill();
    let status = second.wait().expect("wait for pgbench");
    let second_out = std::fs::read_to_string(&second_log).unwrap_or_default();
    assert!(
        !status.success(),
        "pgbench went on with cairn killed:\n{second_out}"
    );
    // Without a count (pgbench printed nothing), only the first run's commits are known.
    let second_done = processed(&second_out).unwrap_or(0);
    let _ = server.stop(libc::SIGKILL, Duration::from_secs(10));
    eprintln!("second run: {second_done} transactions acknowledged before SIGKILL of cairn");

    // The dead server's mount answers nothing: take it away, then serve and mount again.
    drop(Unmount(at.clone()));
    let mut server = env.serve();
    env.ok(&["mount", "tank/pg", at.to_str().unwrap()]);
    let started = Instant::now();
    let log_before_restart = std::fs::metadata(&cluster.log).map_or(0, |m| m.len()) as usize;
    cluster.start();
    let logs = cluster.logs();
    assert!(
        logs.contains("database system was not properly shut down; automatic recovery")
            && logs.contains("redo done"),
        "PostgreSQL did no crash recovery:\n{logs}"
    );
    eprintln!(
        "restart with crash recovery: {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // Every page and index of every database.
    let mut amcheck = cluster.command("pg_amcheck");
    amcheck.args([
        "--all",
        "--install-missing",
        "--heapallindexed",
        "--rootdescend",
    ]);
    let check = run_limited(&mut amcheck, Duration::from_secs(600));
    assert!(
        check.success() && check.stdout.trim().is_empty(),
        "pg_amcheck found damage:\n{}\n{}",
        check.describe(),
        cluster.logs()
    );

    // pgbench's tables: their sizes, and every transaction whole.
    assert_eq!(
        cluster.query_i64("SELECT count(*) FROM pgbench_accounts"),
        (SCALE * 100_000) as i64
    );
    assert_eq!(
        cluster.query_i64("SELECT count(*) FROM pgbench_tellers"),
        (SCALE * 10) as i64
    );
    assert_eq!(
        cluster.query_i64("SELECT count(*) FROM pgbench_branches"),
        SCALE as i64
    );
    let sums = cluster.query(
        "SELECT (SELECT sum(abalance) FROM pgbench_accounts) || ' ' || \
                (SELECT sum(tbalance) FROM pgbench_tellers) || ' ' || \
                (SELECT sum(bbalance) FROM pgbench_branches) || ' ' || \
                (SELECT coalesce(sum(delta), 0) FROM pgbench_history)",
    );
    let sums: Vec<&str> = sums.split(' ').collect();
    assert!(
        sums.len() == 4 && sums.iter().all(|sum| *sum == sums[0]),
        "balances of accounts, tellers, branches and the history differ: {sums:?}"
    );
    let committed = cluster.query_i64("SELECT count(*) FROM pgbench_history") as u64;
    let acknowledged = first_done + second_done;
    assert!(
        committed >= acknowledged,
        "{committed} transactions in the history, {acknowledged} acknowledged \
         ({first_done} + {second_done}): acknowledged commits lost"
    );
    assert!(
        committed <= acknowledged + CLIENTS,
        "{committed} transactions in the history, only {acknowledged} acknowledged and \
         {CLIENTS} in flight"
    );
    eprintln!("history: {committed} transactions ({acknowledged} acknowledged)");

    // The database works on: a few more transactions and a checkpoint, then a clean stop.
    cluster.run_ok(
        "pgbench",
        &["-n", "-c", &clients, "-j", "2", "-t", "200"],
        Duration::from_secs(300),
    );
    cluster.query("CHECKPOINT");
    cluster.stop();
    // From the restart on, PostgreSQL met no error (an EIO or a bad page would be logged).
    let log = std::fs::read_to_string(&cluster.log).unwrap_or_default();
    let errors: Vec<&str> = log
        .get(log_before_restart..)
        .unwrap_or_default()
        .lines()
        .filter(|line| line.contains("ERROR:") || line.contains("PANIC:"))
        .collect();
    assert!(
        errors.is_empty(),
        "PostgreSQL logged errors after the restart:\n{}",
        errors.join("\n")
    );
    // Offline, every page of every relation file (maps and TOAST included) against its
    // checksum.
    let checksums = cluster.run_ok(
        "pg_checksums",
        &["--check", "-D", data.to_str().unwrap()],
        Duration::from_secs(300),
    );
    assert!(
        checksums.stdout.contains("Bad checksums:  0"),
        "{}",
        checksums.describe()
    );
    env.ok(&["unmount", "tank/pg"]);
    server.stop(libc::SIGINT, Duration::from_secs(60));
    env.assert_pool_check_clean();
}
