//! Helpers for the end-to-end NBD tests (`tests/nbd.rs`): a private pool in a temporary
//! directory, a `cairn serve` process guard, stock NBD clients run with a time limit, a tiny
//! JSON reader (for `nbdinfo --json` and `fio --output-format=json`), a minimal raw NBD client
//! (to see the exact error a server sends), and file utilities.
//!
//! Every external program is a real process; nothing here links against cairn's crates.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub const MIB: u64 = 1 << 20;

/// How long a server may take to import its pools and start listening.
const SERVER_READY: Duration = Duration::from_secs(30);
/// How long a stopped server may take to sync and export its pools.
pub const SERVER_STOP: Duration = Duration::from_secs(30);
/// Default limit for one client command.
pub const TOOL_TIME: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------------------------------
// Serializing the heavy tests
// ---------------------------------------------------------------------------------------------

static HEAVY: Mutex<()> = Mutex::new(());

/// Held by tests that move a lot of data, so at most one of them runs at a time on the two
/// shared cores (light tests still run beside it).
pub fn heavy() -> MutexGuard<'static, ()> {
    HEAVY
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

// ---------------------------------------------------------------------------------------------
// External tools
// ---------------------------------------------------------------------------------------------

/// `$CARGO_TARGET_DIR/guest`: the guest kernel's cache, shared by every test that boots one.
pub fn guest_cache_dir() -> PathBuf {
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    tmp.parent()
        .map_or(tmp.clone(), |target| target.join("guest"))
}

/// A TCP port free on loopback now (the kernel's pick; a test binds it soon after).
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

/// The path of `name`, or a failure naming the Debian package that provides it. The tests never
/// skip: a missing client is a broken test environment.
pub fn tool(name: &str, package: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join(name);
        if let Ok(meta) = std::fs::metadata(&candidate) {
            use std::os::unix::fs::PermissionsExt;
            if meta.is_file() && meta.permissions().mode() & 0o111 != 0 {
                return candidate;
            }
        }
    }
    panic!(
        "`{name}` is not on PATH: install the Debian package `{package}` \
         (apt-get install {package}); these tests need it and do not skip"
    );
}

pub fn qemu_img() -> PathBuf {
    tool("qemu-img", "qemu-utils")
}
pub fn qemu_io() -> PathBuf {
    tool("qemu-io", "qemu-utils")
}
pub fn nbdinfo() -> PathBuf {
    tool("nbdinfo", "libnbd-bin")
}
pub fn nbdcopy() -> PathBuf {
    tool("nbdcopy", "libnbd-bin")
}
pub fn fio() -> PathBuf {
    tool("fio", "fio")
}

/// The result of one client command.
pub struct Run {
    pub what: String,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn success(&self) -> bool {
        self.status.success()
    }

    /// Everything about the run, for assertion messages.
    pub fn describe(&self) -> String {
        format!(
            "{} -> {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.what, self.status, self.stdout, self.stderr
        )
    }

    /// Panics unless the command succeeded; returns `self` for chaining.
    pub fn ok(self) -> Run {
        assert!(self.success(), "command failed:\n{}", self.describe());
        self
    }

    /// Panics unless the command failed.
    pub fn failed(self) -> Run {
        assert!(
            !self.success(),
            "command should have failed:\n{}",
            self.describe()
        );
        self
    }
}

/// Runs `cmd` to completion with a time limit (killing it and failing when it is exceeded), so a
/// server that stops answering fails the test instead of hanging it.
pub fn run_limited(cmd: &mut Command, limit: Duration) -> Run {
    let what = format!("{cmd:?}");
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|err| panic!("cannot run {what}: {err}"));
    let mut out_pipe = child.stdout.take().expect("stdout pipe");
    let mut err_pipe = child.stderr.take().expect("stderr pipe");
    let out_reader = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = out_pipe.read_to_end(&mut bytes);
        bytes
    });
    let err_reader = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = err_pipe.read_to_end(&mut bytes);
        bytes
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for a client") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let stdout =
                String::from_utf8_lossy(&out_reader.join().unwrap_or_default()).into_owned();
            let stderr =
                String::from_utf8_lossy(&err_reader.join().unwrap_or_default()).into_owned();
            panic!(
                "{what} did not finish within {limit:?} (killed)\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}"
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = String::from_utf8_lossy(&out_reader.join().unwrap_or_default()).into_owned();
    let stderr = String::from_utf8_lossy(&err_reader.join().unwrap_or_default()).into_owned();
    Run {
        what,
        status,
        stdout,
        stderr,
    }
}

/// Runs a program with arguments under the default time limit.
pub fn run(program: &Path, args: &[&str]) -> Run {
    run_limited(Command::new(program).args(args), TOOL_TIME)
}

/// `qemu-io -f raw` on `uri` with one `-c` per command.
pub fn qemu_io_run(uri: &str, commands: &[&str]) -> Run {
    let mut cmd = Command::new(qemu_io());
    cmd.arg("-f").arg("raw");
    for command in commands {
        cmd.arg("-c").arg(command);
    }
    cmd.arg(uri);
    run_limited(&mut cmd, TOOL_TIME)
}

/// `qemu-io` commands that must all succeed, without any pattern mismatch.
pub fn qemu_io_ok(uri: &str, commands: &[&str]) -> Run {
    let run = qemu_io_run(uri, commands).ok();
    let text = format!("{}{}", run.stdout, run.stderr);
    assert!(
        !text.contains("Pattern verification failed") && !text.contains("failed:"),
        "qemu-io reported a failure:\n{}",
        run.describe()
    );
    run
}

// ---------------------------------------------------------------------------------------------
// A private pool
// ---------------------------------------------------------------------------------------------

/// A temporary directory holding devices (`devs/`), the state directory (`state/`, with the
/// pool cache and the server's sockets) and any scratch files of one test.
pub struct Env {
    pub dir: tempfile::TempDir,
}

impl Env {
    pub fn new() -> Env {
        // Unix socket paths are limited to ~108 bytes: stay under a short base directory.
        let base = std::env::temp_dir();
        let base = if base.as_os_str().len() > 40 {
            PathBuf::from("/tmp")
        } else {
            base
        };
        let dir = tempfile::Builder::new()
            .prefix("cairn-nbd-")
            .tempdir_in(base)
            .expect("tempdir");
        std::fs::create_dir(dir.path().join("devs")).expect("devs dir");
        Env { dir }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn state(&self) -> PathBuf {
        self.path("state")
    }

    pub fn socket(&self) -> PathBuf {
        self.state().join("nbd.sock")
    }

    pub fn control_socket(&self) -> PathBuf {
        self.state().join("control.sock")
    }

    pub fn dev(&self, name: &str) -> String {
        self.path("devs").join(name).display().to_string()
    }

    pub fn cairn_command(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_cairn"));
        cmd.arg("--state-dir")
            .arg(self.state())
            .env_remove("CAIRN_STATE_DIR")
            .env("HOME", self.dir.path())
            .current_dir(self.dir.path());
        cmd
    }

    /// Runs `cairn --state-dir S ARGS` (forwarded to the server if one runs).
    pub fn cairn(&self, args: &[&str]) -> Run {
        run_limited(self.cairn_command().args(args), TOOL_TIME)
    }

    /// A cairn command that must succeed; returns its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let run = self.cairn(args);
        assert!(run.success(), "cairn {args:?} failed:\n{}", run.describe());
        run.stdout
    }

    /// A mirrored pool `tank` of two sparse 512 MiB files.
    pub fn create_pool(&self) {
        self.create_pool_of("512M");
    }

    /// A mirrored pool `tank` of two sparse files of `size`.
    pub fn create_pool_of(&self, size: &str) {
        let (d0, d1) = (self.dev("d0.img"), self.dev("d1.img"));
        self.ok(&["pool", "create", "--size", size, "tank", "mirror", &d0, &d1]);
    }

    /// `cairn create -V SIZE [-o PROP=VALUE]... NAME`.
    pub fn create_volume(&self, name: &str, size: &str, properties: &[&str]) {
        let mut args = vec!["create", "-V", size];
        for property in properties {
            args.push("-o");
            args.push(property);
        }
        args.push(name);
        self.ok(&args);
    }

    /// `pool check tank` with the server stopped: must report a clean pool.
    pub fn assert_pool_check_clean(&self) {
        let run = self.cairn(&["pool", "check", "tank"]);
        assert!(
            run.success() && run.stdout.contains("no problems found"),
            "pool check is not clean:\n{}",
            run.describe()
        );
    }

    /// Starts `cairn serve` on a free loopback port and `state/nbd.sock`; returns once it
    /// answers on the socket.
    pub fn serve(&self) -> Server {
        Server::start(self, &[], &[])
    }

    /// `serve` with extra environment variables (fault injection).
    pub fn serve_with_env(&self, vars: &[(&str, String)]) -> Server {
        Server::start(self, vars, &[])
    }

    /// `serve` with extra command-line arguments.
    pub fn serve_with_args(&self, args: &[&str]) -> Server {
        Server::start(self, &[], args)
    }

    /// `serve` with extra environment variables and command-line arguments.
    pub fn serve_with(&self, vars: &[(&str, String)], args: &[&str]) -> Server {
        Server::start(self, vars, args)
    }
}

// ---------------------------------------------------------------------------------------------
// The server process
// ---------------------------------------------------------------------------------------------

static SERVER_RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A running `cairn serve`. Output goes to files in the test's directory (printed when the test
/// fails); dropping the guard kills a process still running.
pub struct Server {
    child: Option<Child>,
    pub socket: PathBuf,
    pub stdout_path: PathBuf,
    pub stderr_path: PathBuf,
    /// The TCP port it listens on (parsed from its first line).
    pub port: u16,
    /// The number of exports its first line announced.
    pub announced: usize,
    exit: Option<ExitStatus>,
}

impl Server {
    fn start(env: &Env, vars: &[(&str, String)], args: &[&str]) -> Server {
        let run = SERVER_RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let stdout_path = env.path(&format!("serve-{run}.out"));
        let stderr_path = env.path(&format!("serve-{run}.err"));
        let socket = env.socket();
        let mut cmd = env.cairn_command();
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--socket"])
            .arg(&socket)
            .args(args)
            .envs(vars.iter().map(|(key, value)| (*key, value.as_str())))
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout_path).expect("server stdout file"))
            .stderr(std::fs::File::create(&stderr_path).expect("server stderr file"));
        let child = cmd.spawn().expect("spawn cairn serve");
        let mut server = Server {
            child: Some(child),
            socket,
            stdout_path,
            stderr_path,
            port: 0,
            announced: 0,
            exit: None,
        };
        server.wait_ready();
        server
    }

    pub fn stdout(&self) -> String {
        std::fs::read_to_string(&self.stdout_path).unwrap_or_default()
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    pub fn logs(&self) -> String {
        format!(
            "--- cairn serve stdout ({}) ---\n{}\n--- cairn serve stderr ({}) ---\n{}",
            self.stdout_path.display(),
            self.stdout(),
            self.stderr_path.display(),
            self.stderr()
        )
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("server process").id() as i32
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + SERVER_READY;
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().expect("try_wait") {
                self.exit = Some(status);
                panic!(
                    "cairn serve exited ({status}) before serving\n{}",
                    self.logs()
                );
            }
            let out = self.stdout();
            if let Some(first) = out.lines().next()
                && out.contains('\n')
                && self.socket.exists()
                && UnixStream::connect(&self.socket).is_ok()
            {
                self.parse_banner(first);
                return;
            }
            if Instant::now() > deadline {
                panic!(
                    "cairn serve did not start serving on {} within {SERVER_READY:?}\n{}",
                    self.socket.display(),
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `cairn: serving N export(s) on nbd://127.0.0.1:PORT and nbd+unix:///?socket=PATH`
    fn parse_banner(&mut self, first: &str) {
        let logs = self.logs();
        let bad = |why: &str| -> ! { panic!("unexpected first line ({why}): {first:?}\n{logs}") };
        let rest = first
            .strip_prefix("cairn: serving ")
            .unwrap_or_else(|| bad("prefix"));
        let (count, rest) = rest.split_once(' ').unwrap_or_else(|| bad("count"));
        self.announced = count.parse().unwrap_or_else(|_| bad("count"));
        // nbds:// when the server requires TLS.
        let (scheme, rest) = rest
            .strip_prefix("export(s) on ")
            .and_then(|rest| rest.split_once("://127.0.0.1:"))
            .unwrap_or_else(|| bad("tcp address"));
        let (port, rest) = rest.split_once(' ').unwrap_or_else(|| bad("port"));
        self.port = port.parse().unwrap_or_else(|_| bad("port"));
        assert_ne!(self.port, 0, "a real port, not 0: {first}");
        let expected = format!("and {scheme}+unix:///?socket={}", self.socket.display());
        assert_eq!(rest, expected, "the Unix socket in: {first}");
    }

    /// The exports the server announced at start (`  nbd://127.0.0.1:PORT/NAME` lines), as names.
    pub fn announced_exports(&self) -> Vec<String> {
        let prefix = format!("  nbd://127.0.0.1:{}/", self.port);
        // The lines follow the first at once; give a slow process a moment to write them all.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let names: Vec<String> = self
                .stdout()
                .lines()
                .filter_map(|line| line.strip_prefix(&prefix).map(str::to_string))
                .collect();
            if names.len() >= self.announced || Instant::now() > deadline {
                return names;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `nbd+unix:///EXPORT?socket=PATH`
    pub fn uri(&self, export: &str) -> String {
        format!("nbd+unix:///{export}?socket={}", self.socket.display())
    }

    /// The socket URI without an export (for `nbdinfo --list`).
    pub fn list_uri(&self) -> String {
        format!("nbd+unix://?socket={}", self.socket.display())
    }

    /// `nbd://127.0.0.1:PORT/EXPORT`
    pub fn tcp_uri(&self, export: &str) -> String {
        format!("nbd://127.0.0.1:{}/{export}", self.port)
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        match &mut self.child {
            Some(child) => match child.try_wait().expect("try_wait") {
                Some(status) => {
                    self.exit = Some(status);
                    self.child = None;
                    false
                }
                None => true,
            },
            None => false,
        }
    }

    /// Sends `signal` to the running server (without waiting).
    pub fn signal(&self, signal: i32) {
        let child = self.child.as_ref().expect("the server is running");
        // SAFETY: kill(2) on the pid of our own child, which has not been waited for yet.
        let sent = unsafe { libc::kill(child.id() as i32, signal) };
        assert_eq!(sent, 0, "kill({signal}) failed");
    }

    /// Sends `signal` and waits (up to `limit`) for the process to end; returns its status and
    /// how long it took.
    pub fn stop(&mut self, signal: i32, limit: Duration) -> (ExitStatus, Duration) {
        let start = Instant::now();
        self.signal(signal);
        self.wait_exit(signal, start, limit)
    }

    /// Waits for a process that was sent `signal` at `start` to end.
    pub fn wait_exit(
        &mut self,
        signal: i32,
        start: Instant,
        limit: Duration,
    ) -> (ExitStatus, Duration) {
        let mut child = self.child.take().expect("the server is running");
        loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                self.exit = Some(status);
                return (status, start.elapsed());
            }
            if start.elapsed() > limit {
                let _ = child.kill();
                let status = child.wait().ok();
                self.exit = status;
                panic!(
                    "cairn serve did not exit within {limit:?} of signal {signal} (killed: {status:?})\n{}",
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then the process must exit 0.
    pub fn terminate(&mut self) -> Duration {
        let (status, took) = self.stop(libc::SIGTERM, SERVER_STOP);
        assert!(
            status.success(),
            "cairn serve should exit 0 on SIGTERM, got {status}\n{}",
            self.logs()
        );
        took
    }

    /// SIGKILL: nothing is cleaned up.
    pub fn kill(&mut self) {
        let (status, _) = self.stop(libc::SIGKILL, SERVER_STOP);
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{status}");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!("{}", self.logs());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// nbdinfo
// ---------------------------------------------------------------------------------------------

/// `nbdinfo --json URI`: the one export's object.
pub fn nbdinfo_json(uri: &str) -> Json {
    let run = run(&nbdinfo(), &["--json", uri]).ok();
    let doc = Json::parse(&run.stdout).unwrap_or_else(|err| panic!("{err}:\n{}", run.describe()));
    let exports = doc
        .get("exports")
        .and_then(Json::as_array)
        .unwrap_or_else(|| panic!("no exports in:\n{}", run.describe()));
    assert_eq!(exports.len(), 1, "{}", run.describe());
    exports[0].clone()
}

/// `nbdinfo --list --json URI`: export name -> its object.
pub fn nbdinfo_list(uri: &str) -> std::collections::BTreeMap<String, Json> {
    let run = run(&nbdinfo(), &["--list", "--json", uri]).ok();
    let doc = Json::parse(&run.stdout).unwrap_or_else(|err| panic!("{err}:\n{}", run.describe()));
    doc.get("exports")
        .and_then(Json::as_array)
        .unwrap_or_else(|| panic!("no exports in:\n{}", run.describe()))
        .iter()
        .map(|export| {
            let name = export
                .get("export-name")
                .and_then(Json::as_str)
                .unwrap_or_else(|| panic!("export without a name:\n{}", run.describe()));
            (name.to_string(), export.clone())
        })
        .collect()
}

/// One run of the `nbdinfo --map` output: offset, length, type (bit 0 hole, bit 1 zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub offset: u64,
    pub length: u64,
    pub kind: u32,
}

/// `nbdinfo --map URI` (base:allocation), with adjacent runs of the same type merged (a server
/// may split its answer anywhere).
pub fn nbdinfo_map(uri: &str) -> Vec<Extent> {
    let run = run(&nbdinfo(), &["--map", uri]).ok();
    let mut extents: Vec<Extent> = Vec::new();
    for line in run.stdout.lines().filter(|line| !line.trim().is_empty()) {
        let mut words = line.split_whitespace();
        let mut number = || -> u64 {
            words
                .next()
                .and_then(|word| word.parse().ok())
                .unwrap_or_else(|| panic!("bad map line {line:?}:\n{}", run.describe()))
        };
        let (offset, length, kind) = (number(), number(), number() as u32);
        match extents.last_mut() {
            Some(last) if last.kind == kind && last.offset + last.length == offset => {
                last.length += length;
            }
            Some(last) => {
                assert_eq!(
                    last.offset + last.length,
                    offset,
                    "the map has a gap or overlap:\n{}",
                    run.describe()
                );
                extents.push(Extent {
                    offset,
                    length,
                    kind,
                });
            }
            None => {
                assert_eq!(offset, 0, "the map starts at 0:\n{}", run.describe());
                extents.push(Extent {
                    offset,
                    length,
                    kind,
                });
            }
        }
    }
    extents
}

// ---------------------------------------------------------------------------------------------
// A small JSON reader
// ---------------------------------------------------------------------------------------------

/// A JSON value. Numbers keep their text so large integers stay exact.
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Number(String),
    String(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    /// Parses the first JSON value in `text` (tools sometimes print notes before it).
    pub fn parse(text: &str) -> Result<Json, String> {
        let start = text
            .find(['{', '['])
            .ok_or_else(|| "no JSON value in the output".to_string())?;
        let mut parser = JsonParser {
            bytes: &text.as_bytes()[start..],
            at: 0,
        };
        parser.value()
    }

    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(fields) => fields.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&Vec<Json>> {
        match self {
            Json::Array(items) => Some(items),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::String(text) => Some(text),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Json::Bool(value) => Some(*value),
            _ => None,
        }
    }

    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Json::Number(text) => text.parse().ok(),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Json::Number(text) => text.parse().ok(),
            _ => None,
        }
    }

    /// A boolean field that must be present.
    pub fn flag(&self, key: &str) -> bool {
        self.get(key)
            .and_then(Json::as_bool)
            .unwrap_or_else(|| panic!("no boolean {key:?} in {self:?}"))
    }

    /// An integer field that must be present.
    pub fn number(&self, key: &str) -> u64 {
        self.get(key)
            .and_then(Json::as_u64)
            .unwrap_or_else(|| panic!("no integer {key:?} in {self:?}"))
    }
}

struct JsonParser<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl JsonParser<'_> {
    fn skip_space(&mut self) {
        while self.at < self.bytes.len() && self.bytes[self.at].is_ascii_whitespace() {
            self.at += 1;
        }
    }

    fn error(&self, what: &str) -> String {
        format!("bad JSON at byte {}: {what}", self.at)
    }

    fn expect(&mut self, byte: u8) -> Result<(), String> {
        self.skip_space();
        if self.bytes.get(self.at) == Some(&byte) {
            self.at += 1;
            Ok(())
        } else {
            Err(self.error(&format!("expected {:?}", byte as char)))
        }
    }

    fn literal(&mut self, word: &str, value: Json) -> Result<Json, String> {
        if self.bytes[self.at..].starts_with(word.as_bytes()) {
            self.at += word.len();
            Ok(value)
        } else {
            Err(self.error("unknown literal"))
        }
    }

    fn value(&mut self) -> Result<Json, String> {
        self.skip_space();
        match self.bytes.get(self.at) {
            Some(b'{') => {
                self.at += 1;
                let mut fields = Vec::new();
                self.skip_space();
                if self.bytes.get(self.at) == Some(&b'}') {
                    self.at += 1;
                    return Ok(Json::Object(fields));
                }
                loop {
                    self.skip_space();
                    let key = self.string()?;
                    self.expect(b':')?;
                    let value = self.value()?;
                    fields.push((key, value));
                    self.skip_space();
                    match self.bytes.get(self.at) {
                        Some(b',') => self.at += 1,
                        Some(b'}') => {
                            self.at += 1;
                            return Ok(Json::Object(fields));
                        }
                        _ => return Err(self.error("expected , or }")),
                    }
                }
            }
            Some(b'[') => {
                self.at += 1;
                let mut items = Vec::new();
                self.skip_space();
                if self.bytes.get(self.at) == Some(&b']') {
                    self.at += 1;
                    return Ok(Json::Array(items));
                }
                loop {
                    items.push(self.value()?);
                    self.skip_space();
                    match self.bytes.get(self.at) {
                        Some(b',') => self.at += 1,
                        Some(b']') => {
                            self.at += 1;
                            return Ok(Json::Array(items));
                        }
                        _ => return Err(self.error("expected , or ]")),
                    }
                }
            }
            Some(b'"') => Ok(Json::String(self.string()?)),
            Some(b't') => self.literal("true", Json::Bool(true)),
            Some(b'f') => self.literal("false", Json::Bool(false)),
            Some(b'n') => self.literal("null", Json::Null),
            Some(b'-' | b'0'..=b'9') => {
                let start = self.at;
                while self.at < self.bytes.len()
                    && matches!(
                        self.bytes[self.at],
                        b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'
                    )
                {
                    self.at += 1;
                }
                Ok(Json::Number(
                    String::from_utf8_lossy(&self.bytes[start..self.at]).into_owned(),
                ))
            }
            _ => Err(self.error("expected a value")),
        }
    }

    fn string(&mut self) -> Result<String, String> {
        self.expect(b'"')?;
        let mut out = Vec::new();
        loop {
            let Some(&byte) = self.bytes.get(self.at) else {
                return Err(self.error("unterminated string"));
            };
            self.at += 1;
            match byte {
                b'"' => return Ok(String::from_utf8_lossy(&out).into_owned()),
                b'\\' => {
                    let Some(&escaped) = self.bytes.get(self.at) else {
                        return Err(self.error("unterminated escape"));
                    };
                    self.at += 1;
                    match escaped {
                        b'n' => out.push(b'\n'),
                        b't' => out.push(b'\t'),
                        b'r' => out.push(b'\r'),
                        b'b' => out.push(8),
                        b'f' => out.push(12),
                        b'u' => {
                            let hex = self
                                .bytes
                                .get(self.at..self.at + 4)
                                .ok_or_else(|| self.error("short \\u escape"))?;
                            let code = u32::from_str_radix(&String::from_utf8_lossy(hex), 16)
                                .map_err(|_| self.error("bad \\u escape"))?;
                            self.at += 4;
                            let ch = char::from_u32(code).unwrap_or('\u{fffd}');
                            out.extend_from_slice(ch.to_string().as_bytes());
                        }
                        other => out.push(other),
                    }
                }
                other => out.push(other),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A minimal raw NBD client (fixed newstyle, simple replies), for exact error codes
// ---------------------------------------------------------------------------------------------

pub const NBD_CMD_READ: u16 = 0;
pub const NBD_CMD_WRITE: u16 = 1;
pub const NBD_CMD_FLUSH: u16 = 3;
pub const NBD_CMD_TRIM: u16 = 4;
pub const NBD_FLAG_READ_ONLY: u16 = 1 << 1;
pub const NBD_REP_ERR_UNKNOWN: u32 = (1 << 31) | 6;
pub const NBD_EPERM: u32 = 1;
pub const NBD_ESHUTDOWN: u32 = 108;
pub const NBD_ENOSPC: u32 = 28;

const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
const REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
const NBD_OPT_GO: u32 = 7;
const NBD_REP_ACK: u32 = 1;
const NBD_REP_INFO: u32 = 3;

pub struct RawClient {
    stream: UnixStream,
    pub size: u64,
    pub flags: u16,
    cookie: u64,
}

fn read_u16(stream: &mut UnixStream) -> u16 {
    let mut raw = [0u8; 2];
    stream.read_exact(&mut raw).expect("read from the server");
    u16::from_be_bytes(raw)
}
fn read_u32(stream: &mut UnixStream) -> u32 {
    let mut raw = [0u8; 4];
    stream.read_exact(&mut raw).expect("read from the server");
    u32::from_be_bytes(raw)
}
fn read_u64(stream: &mut UnixStream) -> u64 {
    let mut raw = [0u8; 8];
    stream.read_exact(&mut raw).expect("read from the server");
    u64::from_be_bytes(raw)
}

impl RawClient {
    /// Handshake and NBD_OPT_GO for `export`; `Err(reply type)` when the server refuses it.
    pub fn connect(socket: &Path, export: &str) -> Result<RawClient, u32> {
        let mut stream = UnixStream::connect(socket).expect("connect to the NBD socket");
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .expect("timeout");
        assert_eq!(read_u64(&mut stream), NBDMAGIC, "server greeting");
        assert_eq!(read_u64(&mut stream), IHAVEOPT, "fixed newstyle");
        let handshake = read_u16(&mut stream);
        assert!(handshake & 1 != 0, "NBD_FLAG_FIXED_NEWSTYLE");
        let client_flags: u32 = 1 | (u32::from(handshake) & 2);
        stream.write_all(&client_flags.to_be_bytes()).unwrap();
        let mut data = Vec::new();
        data.extend_from_slice(&(export.len() as u32).to_be_bytes());
        data.extend_from_slice(export.as_bytes());
        data.extend_from_slice(&0u16.to_be_bytes());
        let mut option = Vec::new();
        option.extend_from_slice(&IHAVEOPT.to_be_bytes());
        option.extend_from_slice(&NBD_OPT_GO.to_be_bytes());
        option.extend_from_slice(&(data.len() as u32).to_be_bytes());
        option.extend_from_slice(&data);
        stream.write_all(&option).unwrap();
        let (mut size, mut flags) = (None, None);
        loop {
            assert_eq!(read_u64(&mut stream), REPLY_MAGIC, "option reply magic");
            assert_eq!(read_u32(&mut stream), NBD_OPT_GO, "reply to NBD_OPT_GO");
            let kind = read_u32(&mut stream);
            let len = read_u32(&mut stream) as usize;
            assert!(len < 1 << 20, "option reply of {len} bytes");
            let mut payload = vec![0u8; len];
            stream.read_exact(&mut payload).unwrap();
            if kind & (1 << 31) != 0 {
                return Err(kind);
            }
            match kind {
                NBD_REP_INFO if payload.len() >= 12 && payload[..2] == [0, 0] => {
                    size = Some(u64::from_be_bytes(payload[2..10].try_into().unwrap()));
                    flags = Some(u16::from_be_bytes(payload[10..12].try_into().unwrap()));
                }
                NBD_REP_INFO => {}
                NBD_REP_ACK => break,
                other => panic!("unexpected reply type {other:#x} to NBD_OPT_GO"),
            }
        }
        Ok(RawClient {
            stream,
            size: size.expect("NBD_INFO_EXPORT"),
            flags: flags.expect("NBD_INFO_EXPORT"),
            cookie: 0,
        })
    }

    /// A second handle on the connection (to send from one thread and read on another).
    pub fn stream(&self) -> UnixStream {
        self.stream.try_clone().expect("clone the stream")
    }

    /// One request; returns the error field of the simple reply and the data of a read.
    pub fn request(
        &mut self,
        command: u16,
        offset: u64,
        length: u32,
        data: &[u8],
    ) -> (u32, Vec<u8>) {
        self.cookie += 1;
        let request = encode_request(command, self.cookie, offset, length, data);
        self.stream.write_all(&request).unwrap();
        assert_eq!(
            read_u32(&mut self.stream),
            0x6744_6698,
            "simple reply magic"
        );
        let error = read_u32(&mut self.stream);
        assert_eq!(read_u64(&mut self.stream), self.cookie, "reply cookie");
        let mut payload = Vec::new();
        if command == NBD_CMD_READ && error == 0 {
            payload = vec![0u8; length as usize];
            self.stream.read_exact(&mut payload).unwrap();
        }
        (error, payload)
    }

    /// NBD_CMD_DISC.
    pub fn disconnect(mut self) {
        self.cookie += 1;
        let mut request = Vec::new();
        request.extend_from_slice(&0x2560_9513u32.to_be_bytes());
        request.extend_from_slice(&0u16.to_be_bytes());
        request.extend_from_slice(&2u16.to_be_bytes());
        request.extend_from_slice(&self.cookie.to_be_bytes());
        request.extend_from_slice(&[0u8; 12]);
        let _ = self.stream.write_all(&request);
    }
}

/// A transmission request (no command flags).
pub fn encode_request(command: u16, cookie: u64, offset: u64, length: u32, data: &[u8]) -> Vec<u8> {
    encode_request_with_flags(command, 0, cookie, offset, length, data)
}

/// NBD_CMD_FLAG_FUA.
pub const NBD_CMD_FLAG_FUA: u16 = 1;

/// A transmission request with command flags.
pub fn encode_request_with_flags(
    command: u16,
    flags: u16,
    cookie: u64,
    offset: u64,
    length: u32,
    data: &[u8],
) -> Vec<u8> {
    let mut request = Vec::with_capacity(28 + data.len());
    request.extend_from_slice(&0x2560_9513u32.to_be_bytes());
    request.extend_from_slice(&flags.to_be_bytes());
    request.extend_from_slice(&command.to_be_bytes());
    request.extend_from_slice(&cookie.to_be_bytes());
    request.extend_from_slice(&offset.to_be_bytes());
    request.extend_from_slice(&length.to_be_bytes());
    request.extend_from_slice(data);
    request
}

/// The next simple reply to a non-read request as (cookie, error); `None` when the server
/// closed the connection cleanly between replies.
pub fn read_simple_reply(stream: &mut UnixStream) -> Option<(u64, u32)> {
    let mut raw = [0u8; 16];
    let mut got = 0;
    while got < raw.len() {
        match stream.read(&mut raw[got..]) {
            Ok(0) if got == 0 => return None,
            Ok(0) => panic!("the server closed the connection in the middle of a reply"),
            Ok(n) => got += n,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) if got == 0 && err.kind() == std::io::ErrorKind::ConnectionReset => {
                return None;
            }
            Err(err) => panic!("reading a reply: {err}"),
        }
    }
    assert_eq!(
        u32::from_be_bytes(raw[..4].try_into().unwrap()),
        0x6744_6698,
        "simple reply magic"
    );
    let error = u32::from_be_bytes(raw[4..8].try_into().unwrap());
    let cookie = u64::from_be_bytes(raw[8..16].try_into().unwrap());
    Some((cookie, error))
}

// ---------------------------------------------------------------------------------------------
// Files
// ---------------------------------------------------------------------------------------------

/// Writes `len` bytes of seeded pseudo-random data (splitmix64) to `path`.
pub fn random_file(path: &Path, len: u64, seed: u64) {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).expect("create"));
    let mut state = seed;
    let mut chunk = vec![0u8; MIB as usize];
    let mut left = len;
    while left > 0 {
        for word in chunk.chunks_exact_mut(8) {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            word.copy_from_slice(&(z ^ (z >> 31)).to_le_bytes());
        }
        let take = left.min(chunk.len() as u64) as usize;
        file.write_all(&chunk[..take]).expect("write");
        left -= take as u64;
    }
    file.flush().expect("flush");
}

/// Panics, naming the first differing offset, unless the two files are byte-for-byte equal.
pub fn assert_same_content(expected: &Path, actual: &Path) {
    let (a_len, b_len) = (
        std::fs::metadata(expected).expect("expected file").len(),
        std::fs::metadata(actual).expect("actual file").len(),
    );
    assert_eq!(
        a_len,
        b_len,
        "{} and {} differ in size",
        expected.display(),
        actual.display()
    );
    let mut a = std::io::BufReader::new(std::fs::File::open(expected).unwrap());
    let mut b = std::io::BufReader::new(std::fs::File::open(actual).unwrap());
    let (mut abuf, mut bbuf) = (vec![0u8; MIB as usize], vec![0u8; MIB as usize]);
    let mut offset = 0u64;
    while offset < a_len {
        let take = (a_len - offset).min(MIB) as usize;
        a.read_exact(&mut abuf[..take]).unwrap();
        b.read_exact(&mut bbuf[..take]).unwrap();
        if abuf[..take] != bbuf[..take] {
            let at = abuf[..take]
                .iter()
                .zip(&bbuf[..take])
                .position(|(x, y)| x != y)
                .unwrap();
            let bad = bbuf[at..take]
                .iter()
                .zip(&abuf[at..take])
                .take_while(|(x, y)| x != y)
                .count();
            panic!(
                "{} differs from {} at byte {} ({} bytes differ from there; expected {:#04x}, got {:#04x})",
                actual.display(),
                expected.display(),
                offset + at as u64,
                bad,
                abuf[at],
                bbuf[at]
            );
        }
        offset += take as u64;
    }
}

/// `sha256sum FILE`, the hex digest.
pub fn sha256(path: &Path) -> String {
    let run = run(
        &tool("sha256sum", "coreutils"),
        &[path.to_str().expect("utf-8 path")],
    )
    .ok();
    run.stdout
        .split_whitespace()
        .next()
        .unwrap_or_else(|| panic!("no digest:\n{}", run.describe()))
        .to_string()
}

pub fn path_str(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// A small seeded generator (splitmix64) for workloads that replay from their seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound.max(1)
    }
}

/// Detaches whatever is mounted at the path when dropped, so a test that fails halfway leaves
/// nothing mounted (FUSE tests).
pub struct Unmount(pub PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let Ok(path) = std::ffi::CString::new(self.0.as_os_str().as_encoded_bytes()) else {
            return;
        };
        // SAFETY: a valid NUL-terminated path; MNT_DETACH never blocks.
        unsafe {
            libc::umount2(path.as_ptr(), libc::MNT_DETACH);
        }
    }
}

/// A pool with filesystem `dataset` (made with `properties`, each `NAME=VALUE`) mounted at
/// `mnt` by a server: the mountpoint, its unmount guard and the server.
pub fn served_mount(env: &Env, dataset: &str, properties: &[&str]) -> (PathBuf, Unmount, Server) {
    env.create_pool();
    let mut create = vec!["create"];
    for property in properties {
        create.extend(["-o", property]);
    }
    create.push(dataset);
    env.ok(&create);
    let at = env.path("mnt");
    let cleanup = Unmount(at.clone());
    let server = env.serve();
    env.ok(&["mount", dataset, at.to_str().unwrap()]);
    (at, cleanup, server)
}

/// Runs `argv` as user nobody (uid/gid 65534); whether it succeeded, and its output.
pub fn as_nobody(argv: &[&str]) -> (bool, String) {
    let run = run_limited(
        std::process::Command::new(tool("setpriv", "util-linux"))
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .args(argv),
        std::time::Duration::from_secs(30),
    );
    (run.success(), format!("{}{}", run.stdout, run.stderr))
}

/// What a command said on stderr and whether it succeeded, for commands whose stdin and
/// stdout the caller sets (`run_limited` pipes both): `cairn send` and `receive`.
pub struct CommandOutcome {
    pub success: bool,
    pub stderr: String,
}

/// `qemu-img convert -n` of the raw file `source` into the NBD export `uri` (which must
/// exist and be large enough).
pub fn qemu_copy_in(source: &Path, uri: &str) {
    run(
        &qemu_img(),
        &[
            "convert",
            "-n",
            "-f",
            "raw",
            "-O",
            "raw",
            path_str(source),
            uri,
        ],
    )
    .ok();
}

/// The fsx binary (crates.io `fsx`, which `.ci/run` installs with `cargo install`): cargo's
/// bin directory first, else `PATH`.
pub fn fsx_binary() -> PathBuf {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cargo")
        });
    let installed = home.join("bin/fsx");
    if installed.exists() {
        return installed;
    }
    tool("fsx", "(crates.io) fsx: cargo install fsx --locked")
}

/// Runs `cmd` to its end with stderr captured.
pub fn outcome(mut cmd: Command) -> CommandOutcome {
    let output = cmd.stderr(Stdio::piped()).output().expect("run cairn");
    CommandOutcome {
        success: output.status.success(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}
