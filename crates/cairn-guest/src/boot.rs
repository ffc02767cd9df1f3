//! Booting one guest: its own small archive (an `/init` written for this boot and the caller's
//! script) appended to the cached initramfs, QEMU run with a deadline, the serial console
//! captured, and the script's exit status read back from the marker line init prints.
//!
//! The init (busybox `sh`, PID 1) loads the cached modules, mounts the host's root read-only
//! over 9p under a tmpfs overlay at `/newroot` with fresh `/proc`, `/sys`, `/dev`, `/run`,
//! brings up the network (10.0.2.15, default route via the host at 10.0.2.2), points
//! `/lib/modules/RELEASE` at the cached modules (and the kernel's own module loading, e.g. for
//! `mount -t ext4`, at the host's modprobe in that root: the kernel runs its helper in init's
//! root, the initramfs), mounts the shares, then runs the script with
//! the host's `/bin/sh` chrooted in `/newroot`, prints `MARKER_EXIT STATUS` and powers off. A
//! failing step prints `MARKER_SETUP_FAILED` and powers off at once, so a broken guest ends
//! in seconds instead of at the timeout.

use crate::cpio::Archive;
use crate::prepare::modules_dir;
use crate::{BootOptions, Error, HOST_ADDRESS, Share, tool};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const MARKER_START: &str = "cairn-guest: payload starts";
const MARKER_EXIT: &str = "cairn-guest: payload exit status ";
const MARKER_SETUP_FAILED: &str = "cairn-guest: setup failed: ";
/// The guest's address on QEMU's user network.
const GUEST_ADDRESS: &str = "10.0.2.15/24";
/// PATH of the payload (the host's usual one).
const PAYLOAD_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// How often the wait for QEMU looks at it.
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// Distinguishes the archives of boots running at once in one process.
static BOOTS: AtomicU64 = AtomicU64::new(0);

/// What a guest did.
#[derive(Debug, Clone)]
pub struct GuestRun {
    /// The script's exit status.
    pub exit_code: i32,
    /// Everything the guest wrote on its serial console (kernel messages, init, the script),
    /// with carriage returns dropped.
    pub console: String,
    /// From starting QEMU to the script's start (boot, modules, mounts, network).
    pub boot_time: Duration,
    /// From starting QEMU to its exit.
    pub total_time: Duration,
}

impl GuestRun {
    /// Whether the script exited 0.
    pub fn success(&self) -> bool {
        self.exit_code == 0
    }

    /// What the script wrote (its stdout and stderr, interleaved as on the console, possibly
    /// with kernel messages among them): the console between init's start and exit markers.
    pub fn output(&self) -> &str {
        let start = self
            .console
            .find(MARKER_START)
            .map_or(0, |at| line_end(&self.console, at));
        let end = self
            .console
            .rfind(MARKER_EXIT)
            .unwrap_or(self.console.len());
        self.console.get(start..end.max(start)).unwrap_or_default()
    }
}

/// The offset just past the line holding `at`.
fn line_end(text: &str, at: usize) -> usize {
    text[at..].find('\n').map_or(text.len(), |end| at + end + 1)
}

/// The console read so far, and when the script started.
#[derive(Default)]
struct Console {
    bytes: Vec<u8>,
    payload_started: Option<Instant>,
}

/// Removes a boot's archive when the boot is over, however it ended.
struct BootImage(PathBuf);

impl Drop for BootImage {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

pub(crate) fn boot(
    dir: &Path,
    release: &str,
    script: &str,
    options: &BootOptions,
) -> Result<GuestRun, Error> {
    let init = init_script(&modules_dir(dir, release), release, &options.shares)?;
    let image = boot_image(dir, &init, script)?;
    let args = qemu_args(dir, &image.0, options)?;
    let started = Instant::now();
    let qemu = options.qemu_program.as_str();
    let mut child = Command::new(qemu)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| tool::spawn_error(qemu, err))?;
    let console = Arc::new(Mutex::new(Console::default()));
    let stdout = child.stdout.take().map(|out| {
        let console = Arc::clone(&console);
        std::thread::spawn(move || read_console(out, &console))
    });
    let stderr = child.stderr.take().map(|mut err| {
        std::thread::spawn(move || {
            let mut text = Vec::new();
            let _ = err.read_to_end(&mut text);
            String::from_utf8_lossy(&text).into_owned()
        })
    });
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if started.elapsed() > options.timeout => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(POLL_INTERVAL),
            Err(err) => return Err(Error::io("waiting for QEMU", err)),
        }
    };
    let total_time = started.elapsed();
    if let Some(reader) = stdout {
        let _ = reader.join();
    }
    let qemu_stderr = stderr
        .and_then(|reader| reader.join().ok())
        .unwrap_or_default();
    let (text, payload_started) = {
        let console = console
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        (
            String::from_utf8_lossy(&console.bytes).replace('\r', ""),
            console.payload_started,
        )
    };
    let Some(status) = status else {
        return Err(Error::Timeout {
            timeout: options.timeout,
            console: text,
        });
    };
    if let Some(at) = text.rfind(MARKER_SETUP_FAILED) {
        let reason = text[at + MARKER_SETUP_FAILED.len()..line_end(&text, at)].trim();
        return Err(Error::GuestSetup {
            reason: reason.to_string(),
            console: text,
        });
    }
    let Some(exit_code) = exit_code(&text) else {
        return Err(Error::NoExitStatus {
            status: status.to_string(),
            stderr: qemu_stderr,
            console: text,
        });
    };
    Ok(GuestRun {
        exit_code,
        boot_time: payload_started.map_or(total_time, |at| at.duration_since(started)),
        total_time,
        console: text,
    })
}

/// Appends QEMU's stdout to `console` until it closes, noting when the start marker appears.
fn read_console(mut out: impl Read, console: &Mutex<Console>) {
    let mut buffer = [0u8; 4096];
    loop {
        match out.read(&mut buffer) {
            Ok(0) | Err(_) => return,
            Ok(read) => {
                let mut console = console
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                let from = console.bytes.len().saturating_sub(MARKER_START.len());
                console.bytes.extend_from_slice(&buffer[..read]);
                if console.payload_started.is_none()
                    && console.bytes[from..]
                        .windows(MARKER_START.len())
                        .any(|window| window == MARKER_START.as_bytes())
                {
                    console.payload_started = Some(Instant::now());
                }
            }
        }
    }
}

/// The status on the last exit marker line.
fn exit_code(console: &str) -> Option<i32> {
    let at = console.rfind(MARKER_EXIT)?;
    let rest = &console[at + MARKER_EXIT.len()..line_end(console, at)];
    rest.trim().parse().ok()
}

/// The cached initramfs followed by this boot's archive, in `DIR/boots/`.
fn boot_image(dir: &Path, init: &str, script: &str) -> Result<BootImage, Error> {
    let base_path = dir.join("initramfs.img");
    let mut bytes = std::fs::read(&base_path)
        .map_err(|err| Error::io(format!("reading {}", base_path.display()), err))?;
    let mut archive = Archive::new();
    archive.file("/init", 0o755, init.as_bytes());
    archive.file("/payload.sh", 0o755, script.as_bytes());
    bytes.extend_from_slice(&archive.finish());
    let number = BOOTS.fetch_add(1, Ordering::Relaxed);
    let path = dir
        .join("boots")
        .join(format!("boot-{}-{number}.img", std::process::id()));
    std::fs::write(&path, &bytes)
        .map_err(|err| Error::io(format!("writing {}", path.display()), err))?;
    Ok(BootImage(path))
}

/// A QEMU `-virtfs` option value: commas in a path are doubled.
fn virtfs(host_path: &Path, tag: &str, writable: bool) -> Result<String, Error> {
    let path = host_path
        .to_str()
        .ok_or_else(|| Error::Prepare(format!("{} is not UTF-8", host_path.display())))?;
    let mut value = format!(
        "local,path={},mount_tag={tag},security_model=none,multidevs=remap",
        path.replace(',', ",,")
    );
    if !writable {
        value.push_str(",readonly=on");
    }
    Ok(value)
}

fn qemu_args(dir: &Path, image: &Path, options: &BootOptions) -> Result<Vec<String>, Error> {
    let mut kernel_args = vec![
        "console=ttyS0".to_string(),
        "quiet".to_string(),
        "loglevel=3".to_string(),
        "panic=-1".to_string(),
    ];
    kernel_args.extend(options.extra_kernel_args.iter().cloned());
    let mut args: Vec<String> = [
        "-accel",
        "tcg",
        "-smp",
        "1",
        "-nodefaults",
        "-display",
        "none",
        "-serial",
        "stdio",
        "-no-reboot",
    ]
    .iter()
    .map(|arg| arg.to_string())
    .collect();
    // The uncompressed kernel boots directly (PVH) when the cache has one.
    let mut kernel = dir.join("vmlinux");
    if !kernel.is_file() {
        kernel = dir.join("vmlinuz");
    }
    args.extend([
        "-m".to_string(),
        options.memory_mib.to_string(),
        "-kernel".to_string(),
        kernel.display().to_string(),
        "-initrd".to_string(),
        image.display().to_string(),
        "-append".to_string(),
        kernel_args.join(" "),
        "-virtfs".to_string(),
        virtfs(Path::new("/"), "hostroot", false)?,
        "-netdev".to_string(),
        "user,id=net0".to_string(),
        "-device".to_string(),
        // No option ROM: it is only for network boot, and needs the ipxe-qemu package.
        "virtio-net-pci,netdev=net0,romfile=".to_string(),
    ]);
    for (index, share) in options.shares.iter().enumerate() {
        args.push("-virtfs".to_string());
        args.push(virtfs(
            &share.host_path,
            &format!("share{index}"),
            share.writable,
        )?);
    }
    args.extend(options.extra_qemu_args.iter().cloned());
    Ok(args)
}

/// `text` as one shell word.
pub(crate) fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// The guest's `/init` for this boot.
fn init_script(modules: &Path, release: &str, shares: &[Share]) -> Result<String, Error> {
    let modules = quote(&modules.display().to_string());
    let release = quote(release);
    let mut share_lines = String::new();
    for (index, share) in shares.iter().enumerate() {
        if !share.guest_path.is_absolute() {
            return Err(Error::Prepare(format!(
                "share guest path {} is not absolute",
                share.guest_path.display()
            )));
        }
        let target = quote(&format!("/newroot{}", share.guest_path.display()));
        let mode = if share.writable { "rw" } else { "ro" };
        share_lines.push_str(&format!(
            "mkdir -p {target} && mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,{mode} share{index} {target} || fail \"share {index}\"\n"
        ));
    }
    Ok(format!(
        r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
fail() {{ echo "{MARKER_SETUP_FAILED}$1"; poweroff -f; sleep 60; }}
mount -t proc proc /proc || fail "proc"
mount -t sysfs sysfs /sys || fail "sysfs"
mount -t devtmpfs devtmpfs /dev || fail "devtmpfs"
for module in /modules/*.ko; do insmod "$module" || fail "insmod $module"; done
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000,cache=loose hostroot /lower || fail "9p root"
mount -t tmpfs -o mode=0755 tmpfs /upper || fail "tmpfs"
mkdir -p /upper/data /upper/work
mount -t overlay -o lowerdir=/lower,upperdir=/upper/data,workdir=/upper/work overlay /newroot || fail "overlay"
mount -t proc proc /newroot/proc || fail "proc in root"
mount -t sysfs sysfs /newroot/sys || fail "sysfs in root"
mount -t devtmpfs devtmpfs /newroot/dev || fail "devtmpfs in root"
mkdir -p /newroot/dev/pts /newroot/dev/shm
mount -t devpts devpts /newroot/dev/pts || fail "devpts"
mount -t tmpfs tmpfs /newroot/dev/shm || fail "shm"
mount -t tmpfs -o mode=0755 tmpfs /newroot/run || fail "run"
ip link set lo up && ip link set eth0 up && ip addr add {GUEST_ADDRESS} dev eth0 && ip route add default via {HOST_ADDRESS} || fail "network"
hostname cairn-guest
mkdir -p /newroot/lib/modules && rm -rf /newroot/lib/modules/{release} && ln -s {modules} /newroot/lib/modules/{release} || fail "modules link"
printf '#!/bin/busybox sh\nexec /bin/chroot /newroot /sbin/modprobe "$@"\n' > /bin/root-modprobe && chmod 755 /bin/root-modprobe && echo /bin/root-modprobe > /proc/sys/kernel/modprobe || fail "modprobe helper"
{share_lines}mkdir -p /newroot/run/cairn-guest && cp /payload.sh /newroot/run/cairn-guest/payload.sh || fail "payload"
echo "{MARKER_START}"
env -i PATH={PAYLOAD_PATH} HOME=/root TERM=dumb chroot /newroot /bin/sh /run/cairn-guest/payload.sh </dev/null
status=$?
sync
echo "{MARKER_EXIT}$status"
poweroff -f
"#
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_parse() {
        let console = format!(
            "[ 1.0] kernel\n{MARKER_START}\nhello\n{MARKER_EXIT}7\n[ 2.0] reboot: Power down\n"
        );
        assert_eq!(exit_code(&console), Some(7));
        let run = GuestRun {
            exit_code: 7,
            console,
            boot_time: Duration::ZERO,
            total_time: Duration::ZERO,
        };
        assert_eq!(run.output(), "hello\n");
        assert_eq!(exit_code("no marker"), None);
    }

    #[test]
    fn quoting() {
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), "'it'\\''s'");
    }
}
