//! A throw-away Linux guest for tests that need a real kernel client (the kernel's NBD client,
//! its NFS client, an iSCSI initiator) when the host's kernel lacks one or a test must not
//! touch the host's devices.
//!
//! Shape: [`Guest::prepare`] makes, once per cache directory, everything a boot needs from
//! Debian packages: the distribution's kernel (`linux-image-amd64` and the versioned image it
//! depends on, fetched with `apt-get download`, unpacked with `dpkg-deb -x`, modules indexed with
//! `depmod -b`; the host's `/boot` and `/lib/modules` are never touched) and a small initramfs
//! (static busybox plus the virtio, 9p, overlay and virtio-net modules with their
//! dependencies). [`Guest::boot`] then runs QEMU's emulator (`-accel tcg -smp 1`: the host's
//! `/dev/kvm` may be a hypervisor that cannot run a stock kernel) with the host's root file
//! system shared read-only over 9p under a tmpfs overlay, so every host tool (mkfs, nbd-client,
//! mount.nfs, fsx...) runs in the guest as installed; the guest's `/lib/modules/RELEASE` points
//! at the unpacked modules so `modprobe` works. QEMU's user network makes the host's loopback
//! reachable at [`HOST_ADDRESS`] (10.0.2.2). The caller's shell script runs as the payload of
//! the initramfs' init; its exit status comes back as a marker line on the serial console,
//! which is captured whole, and the guest powers off. The kernel starts from its uncompressed
//! image (a PVH boot, skipping firmware and decompression: ~3 s to the script instead of ~8 s
//! under emulation) when the package's kernel supports it.
//!
//! What a server on the host sees: connections from 127.0.0.1 (QEMU's user network is a NAT
//! inside the QEMU process) from unprivileged source ports, so an NFS server's "secure port"
//! check must be off for these clients; the script runs as root (uid 0 in AUTH_SYS). The
//! guest reads the host's files as they were when it booted (9p with `cache=loose`); a
//! [`Share`] is read live.
//!
//! Invariants: the cache is made under an exclusive lock file and published by one atomic
//! rename, so tests preparing at once (threads or processes) never see half a kernel and later
//! runs reuse it without the network; a cache directory holds one kernel release, the first one
//! prepared (delete the directory to take a newer one). The guest's writes land in its tmpfs and
//! vanish with it, except in [`Share`]s the caller makes writable. The library reads no
//! environment variable and prints nothing: options are parameters, results and console output
//! are returned. A missing tool is an [`Error::MissingTool`] naming its Debian package, so a
//! test fails rather than skips.
//!
//! [`Ganesha`] runs NFS-Ganesha on the host as the reference NFSv3 server such a guest mounts.
//!
//! It depends on no cairn crate and is a dev-dependency only: it sits outside the layers.

mod boot;
mod cpio;
mod ganesha;
mod prepare;
mod tool;

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use boot::GuestRun;
pub use ganesha::Ganesha;

/// The host's loopback as the guest sees it (QEMU's user network).
pub const HOST_ADDRESS: &str = "10.0.2.2";

/// `text` as one word of a guest script (single-quoted), for paths and names built into one.
pub fn shell_quote(text: &str) -> String {
    boot::quote(text)
}

/// A prepared kernel and initramfs, ready to boot any number of guests (also at once).
#[derive(Debug, Clone)]
pub struct Guest {
    /// The published cache directory (`CACHE/kernel-vN`).
    dir: PathBuf,
    /// `uname -r` of the guest's kernel, e.g. `6.1.0-57-amd64`.
    release: String,
}

impl Guest {
    /// Prepares (or finds already prepared) the kernel, its modules and the initramfs under
    /// `cache_dir`, e.g. `$CARGO_TARGET_DIR/guest`. The first preparation downloads ~70 MB with
    /// `apt-get download` (the package lists must be current: `apt-get update`) and keeps
    /// ~330 MB; later ones only look.
    pub fn prepare(cache_dir: &Path) -> Result<Guest, Error> {
        let (dir, release) = prepare::prepare(cache_dir)?;
        Ok(Guest { dir, release })
    }

    /// The guest kernel's release (`uname -r`).
    pub fn kernel_release(&self) -> &str {
        &self.release
    }

    /// The directory holding the kernel's modules (`.../lib/modules/RELEASE`).
    pub fn modules_dir(&self) -> PathBuf {
        prepare::modules_dir(&self.dir, &self.release)
    }

    /// Boots a guest that runs `script` with `/bin/sh` (the host's) as root in the guest, then
    /// powers off. Returns once the guest has stopped: the script's exit status and the whole
    /// console. A guest still running after `options.timeout` is killed
    /// ([`Error::Timeout`], with the console so far).
    pub fn boot(&self, script: &str, options: &BootOptions) -> Result<GuestRun, Error> {
        boot::boot(&self.dir, &self.release, script, options)
    }
}

/// How to boot one guest.
#[derive(Debug, Clone)]
pub struct BootOptions {
    /// The guest's RAM; its tmpfs overlay (everything written outside shares) lives in it.
    pub memory_mib: u32,
    /// Longest the guest may run, boot included, before it is killed.
    pub timeout: Duration,
    /// Host directories mounted in the guest over 9p, in order.
    pub shares: Vec<Share>,
    /// Appended to QEMU's command line (e.g. more devices).
    pub extra_qemu_args: Vec<String>,
    /// Appended to the kernel's command line.
    pub extra_kernel_args: Vec<String>,
    /// The QEMU program (a name looked up on PATH, or a path).
    pub qemu_program: String,
}

impl Default for BootOptions {
    fn default() -> Self {
        BootOptions {
            memory_mib: 512,
            timeout: Duration::from_secs(120),
            shares: Vec::new(),
            extra_qemu_args: Vec::new(),
            extra_kernel_args: Vec::new(),
            qemu_program: "qemu-system-x86_64".to_string(),
        }
    }
}

/// A host directory mounted in the guest over 9p. The whole host root is already visible
/// read-only (under the overlay, as it was at boot, changes written to the guest's tmpfs); a
/// share is for a directory whose changes must reach the host, or be seen live by the guest.
#[derive(Debug, Clone)]
pub struct Share {
    pub host_path: PathBuf,
    pub guest_path: PathBuf,
    pub writable: bool,
}

/// What can go wrong preparing or booting a guest.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("`{tool}` is not installed: install the Debian package `{package}`")]
    MissingTool { tool: String, package: String },
    #[error(
        "{path} is not a statically linked busybox (an initramfs has no libraries): install the Debian package `busybox-static`"
    )]
    BusyboxNotStatic { path: PathBuf },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("`{command}` failed ({status}):\n{stderr}")]
    Command {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("preparing the guest kernel: {0}")]
    Prepare(String),
    #[error("the guest could not set itself up ({reason}); console:\n{console}")]
    GuestSetup { reason: String, console: String },
    #[error(
        "the guest did not finish within {timeout:?}; it was killed; console so far:\n{console}"
    )]
    Timeout { timeout: Duration, console: String },
    #[error(
        "QEMU exited ({status}) without the guest reporting its script's exit status; QEMU's stderr:\n{stderr}\nconsole:\n{console}"
    )]
    NoExitStatus {
        status: String,
        stderr: String,
        console: String,
    },
}

impl Error {
    /// An I/O error with what was being done.
    fn io(what: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io {
            what: what.into(),
            source,
        }
    }
}
