//! Making the cached kernel, modules and initramfs a boot needs, once per cache directory.
//!
//! Layout of `CACHE/kernel-v2/` (the version changes when this layout does): `vmlinuz`,
//! `vmlinux` (the same kernel uncompressed, when it can boot as a PVH guest: QEMU then starts it
//! directly, skipping the firmware and the decompression that cost ~5 s under emulation),
//! `initramfs.img` (busybox and the modules needed to reach the host's root), `root/lib/
//! modules/RELEASE/` (the kernel package's modules, minus drivers no guest of ours loads, indexed
//! by `depmod`), `release` (written last; its presence means "complete"), `boots/` (each boot's
//! own archive, removed after it). It is built in `kernel-v2.tmp` while holding an exclusive
//! `flock` on `CACHE/kernel.lock`, then renamed into place: a reader that sees `kernel-v1` sees
//! all of it, and two preparers never build at once.

use crate::cpio::Archive;
use crate::{Error, tool};
use std::fs;
use std::path::{Path, PathBuf};

/// The published directory's name.
const LAYOUT: &str = "kernel-v2";

/// The modules the initramfs loads to mount the host's root and reach the network, with their
/// dependencies (found by `modprobe --show-depends`).
const INITRAMFS_MODULES: &[&str] = &["virtio_pci", "virtio_net", "9pnet_virtio", "9p", "overlay"];

/// Module directories no test guest loads, dropped to keep the cache small (~150 MB of 400).
const PRUNED_MODULE_DIRS: &[&str] = &[
    "kernel/drivers/gpu",
    "kernel/drivers/media",
    "kernel/drivers/net/wireless",
    "kernel/drivers/staging",
    "kernel/sound",
];

/// The meta-package that names the distribution's current kernel.
const META_PACKAGE: &str = "linux-image-amd64";

/// Where a busybox may be installed (`busybox-static` puts it in /bin; /usr/bin on merged /usr).
const BUSYBOX_PATHS: &[&str] = &["/bin/busybox", "/usr/bin/busybox"];

/// The modules of `release` in the published directory `dir`.
pub(crate) fn modules_dir(dir: &Path, release: &str) -> PathBuf {
    dir.join("root/lib/modules").join(release)
}

/// Finds or makes the published directory under `cache_dir`: (its path, the kernel release).
pub(crate) fn prepare(cache_dir: &Path) -> Result<(PathBuf, String), Error> {
    fs::create_dir_all(cache_dir)
        .map_err(|err| Error::io(format!("creating {}", cache_dir.display()), err))?;
    // Absolute, because the guest finds the modules at the same path through the host's root.
    let cache_dir = fs::canonicalize(cache_dir)
        .map_err(|err| Error::io(format!("resolving {}", cache_dir.display()), err))?;
    let ready = cache_dir.join(LAYOUT);
    if let Some(release) = read_release(&ready)? {
        return Ok((ready, release));
    }
    let lock_path = cache_dir.join("kernel.lock");
    let lock = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|err| Error::io(format!("opening {}", lock_path.display()), err))?;
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive).map_err(|err| {
        Error::io(
            format!("locking {}", lock_path.display()),
            std::io::Error::from(err),
        )
    })?;
    // Another preparer may have finished while this one waited.
    if let Some(release) = read_release(&ready)? {
        return Ok((ready, release));
    }
    let work = cache_dir.join(format!("{LAYOUT}.tmp"));
    remove_dir_if_any(&work)?;
    fs::create_dir_all(&work)
        .map_err(|err| Error::io(format!("creating {}", work.display()), err))?;
    let release = build(&work)?;
    fs::rename(&work, &ready).map_err(|err| {
        Error::io(
            format!("renaming {} to {}", work.display(), ready.display()),
            err,
        )
    })?;
    // The lock is released when `lock` is dropped.
    Ok((ready, release))
}

/// The release recorded in a complete directory, or None if there is none yet.
fn read_release(dir: &Path) -> Result<Option<String>, Error> {
    let path = dir.join("release");
    match fs::read_to_string(&path) {
        Ok(text) => Ok(Some(text.trim().to_string())),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(Error::io(format!("reading {}", path.display()), err)),
    }
}

fn remove_dir_if_any(path: &Path) -> Result<(), Error> {
    match fs::remove_dir_all(path) {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
            Err(Error::io(format!("removing {}", path.display()), err))
        }
        _ => Ok(()),
    }
}

/// Downloads and unpacks the kernel into `work`, indexes its modules, writes the initramfs and,
/// last, `release`. Returns the release.
fn build(work: &Path) -> Result<String, Error> {
    let deb = download_kernel(work)?;
    let root = work.join("root");
    let root_text = path_text(&root)?;
    tool::run("dpkg-deb", &["-x", path_text(&deb)?, root_text], work)?;
    remove_debs(work)?;
    let release = single_release(&root)?;
    let vmlinuz = root.join("boot").join(format!("vmlinuz-{release}"));
    fs::rename(&vmlinuz, work.join("vmlinuz"))
        .map_err(|err| Error::io(format!("moving {}", vmlinuz.display()), err))?;
    let config = root.join("boot").join(format!("config-{release}"));
    let config = fs::read_to_string(&config)
        .map_err(|err| Error::io(format!("reading {}", config.display()), err))?;
    if config.lines().any(|line| line == "CONFIG_PVH=y") {
        extract_vmlinux(work)?;
    }
    // Only lib/modules is used: drop /boot's rest and /usr (documentation, triggers).
    remove_dir_if_any(&root.join("boot"))?;
    remove_dir_if_any(&root.join("usr"))?;
    let modules = root.join("lib/modules").join(&release);
    for pruned in PRUNED_MODULE_DIRS {
        remove_dir_if_any(&modules.join(pruned))?;
    }
    tool::run("depmod", &["-b", root_text, &release], work)?;
    let initramfs = initramfs(work, &root, &release)?;
    write(&work.join("initramfs.img"), &initramfs)?;
    fs::create_dir_all(work.join("boots"))
        .map_err(|err| Error::io(format!("creating {}/boots", work.display()), err))?;
    write(&work.join("release"), format!("{release}\n").as_bytes())?;
    Ok(release)
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    fs::write(path, bytes).map_err(|err| Error::io(format!("writing {}", path.display()), err))
}

fn path_text(path: &Path) -> Result<&str, Error> {
    path.to_str()
        .ok_or_else(|| Error::Prepare(format!("{} is not UTF-8", path.display())))
}

/// Writes `vmlinux`, the ELF kernel inside `vmlinuz` (an xz stream after the decompressor's
/// code), if it holds one; otherwise boots use `vmlinuz`.
fn extract_vmlinux(work: &Path) -> Result<(), Error> {
    const XZ_MAGIC: &[u8] = b"\xfd7zXZ\x00";
    let vmlinuz = work.join("vmlinuz");
    let bytes = fs::read(&vmlinuz)
        .map_err(|err| Error::io(format!("reading {}", vmlinuz.display()), err))?;
    let Some(start) = bytes
        .windows(XZ_MAGIC.len())
        .position(|window| window == XZ_MAGIC)
    else {
        return Ok(());
    };
    let elf = tool::run_with_input("xz", &["-dc", "--single-stream"], &bytes[start..], work)?;
    if elf.get(..4) == Some(b"\x7fELF".as_slice()) {
        write(&work.join("vmlinux"), &elf)?;
    }
    Ok(())
}

/// `apt-get download` of the meta-package, then of the versioned image it depends on; the
/// latter's path.
fn download_kernel(work: &Path) -> Result<PathBuf, Error> {
    let hint = |err: Error| {
        Error::Prepare(format!(
            "downloading the kernel with apt-get (are the package lists current? run `apt-get update`): {err}"
        ))
    };
    tool::run("apt-get", &["download", META_PACKAGE], work).map_err(hint)?;
    let meta = find_deb(work, META_PACKAGE)?;
    let depends = tool::run("dpkg-deb", &["-f", path_text(&meta)?, "Depends"], work)?;
    let depends = String::from_utf8_lossy(&depends);
    // "linux-image-6.1.0-57-amd64 (= 6.1.192-3)": the first name.
    let image = depends
        .split([',', '|', '(', ' '])
        .map(str::trim)
        .find(|name| !name.is_empty())
        .unwrap_or_default()
        .to_string();
    if !image.starts_with("linux-image-") {
        return Err(Error::Prepare(format!(
            "{META_PACKAGE} depends on {depends:?}, not on a linux-image package"
        )));
    }
    tool::run("apt-get", &["download", &image], work).map_err(hint)?;
    find_deb(work, &image)
}

/// The `PACKAGE_VERSION_ARCH.deb` in `dir`.
fn find_deb(dir: &Path, package: &str) -> Result<PathBuf, Error> {
    let prefix = format!("{package}_");
    list(dir)?
        .into_iter()
        .find(|name| name.starts_with(&prefix) && name.ends_with(".deb"))
        .map(|name| dir.join(name))
        .ok_or_else(|| {
            Error::Prepare(format!(
                "apt-get download left no {prefix}*.deb in {}",
                dir.display()
            ))
        })
}

fn remove_debs(dir: &Path) -> Result<(), Error> {
    for name in list(dir)? {
        if name.ends_with(".deb") {
            let path = dir.join(name);
            fs::remove_file(&path)
                .map_err(|err| Error::io(format!("removing {}", path.display()), err))?;
        }
    }
    Ok(())
}

/// The names in a directory, sorted.
fn list(dir: &Path) -> Result<Vec<String>, Error> {
    let entries =
        fs::read_dir(dir).map_err(|err| Error::io(format!("listing {}", dir.display()), err))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|err| Error::io(format!("listing {}", dir.display()), err))?;
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    Ok(names)
}

/// The one release under `root/lib/modules`.
fn single_release(root: &Path) -> Result<String, Error> {
    let releases = list(&root.join("lib/modules"))?;
    match releases.as_slice() {
        [release] => Ok(release.clone()),
        _ => Err(Error::Prepare(format!(
            "expected one kernel release in the package, found {releases:?}"
        ))),
    }
}

/// The initramfs: busybox, `/dev/console`, the mount points init uses, and the modules to
/// load in order (`/modules/NNN-name.ko`; init loads them sorted by name).
fn initramfs(work: &Path, root: &Path, release: &str) -> Result<Vec<u8>, Error> {
    let busybox = static_busybox()?;
    let mut archive = Archive::new();
    for dir in [
        "/bin", "/dev", "/modules", "/proc", "/sys", "/lower", "/upper", "/newroot",
    ] {
        archive.directory(dir);
    }
    archive.char_device("/dev/console", 5, 1);
    archive.file("/bin/busybox", 0o755, &busybox);
    for (index, module) in module_closure(work, root, release)?.iter().enumerate() {
        let name = module
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        let bytes = fs::read(module)
            .map_err(|err| Error::io(format!("reading {}", module.display()), err))?;
        archive.file(
            &format!("/modules/{:03}-{name}", index + 100),
            0o644,
            &bytes,
        );
    }
    Ok(archive.finish())
}

/// Every module file `INITRAMFS_MODULES` need, dependencies first, each once.
fn module_closure(work: &Path, root: &Path, release: &str) -> Result<Vec<PathBuf>, Error> {
    let mut modules: Vec<PathBuf> = Vec::new();
    for module in INITRAMFS_MODULES {
        let args = [
            "-d",
            path_text(root)?,
            "-S",
            release,
            "--show-depends",
            module,
        ];
        let out = tool::run("modprobe", &args, work)?;
        for line in String::from_utf8_lossy(&out).lines() {
            // "insmod PATH [PARAMS]"; "builtin NAME" needs nothing.
            let mut words = line.split_whitespace();
            if let (Some("insmod"), Some(path)) = (words.next(), words.next()) {
                let path = PathBuf::from(path);
                if !path.to_string_lossy().ends_with(".ko") {
                    return Err(Error::Prepare(format!(
                        "{} is compressed; busybox's insmod needs plain .ko files",
                        path.display()
                    )));
                }
                if !modules.contains(&path) {
                    modules.push(path);
                }
            }
        }
    }
    Ok(modules)
}

/// The host's busybox, which must be static: an initramfs has no shared libraries.
fn static_busybox() -> Result<Vec<u8>, Error> {
    let Some(path) = BUSYBOX_PATHS
        .iter()
        .map(Path::new)
        .find(|path| path.is_file())
    else {
        return Err(Error::MissingTool {
            tool: "busybox".to_string(),
            package: tool::package_of("busybox").to_string(),
        });
    };
    let bytes =
        fs::read(path).map_err(|err| Error::io(format!("reading {}", path.display()), err))?;
    if has_interpreter(&bytes) != Some(false) {
        return Err(Error::BusyboxNotStatic {
            path: path.to_path_buf(),
        });
    }
    Ok(bytes)
}

/// Whether a 64-bit little-endian ELF file names a program interpreter (is dynamically
/// linked); None if it is not such an ELF file.
fn has_interpreter(elf: &[u8]) -> Option<bool> {
    const PT_INTERP: u32 = 3;
    if elf.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let u16_at = |at: usize| Some(u16::from_le_bytes(elf.get(at..at + 2)?.try_into().ok()?));
    let phoff = u64::from_le_bytes(elf.get(0x20..0x28)?.try_into().ok()?);
    let phentsize = usize::from(u16_at(0x36)?);
    let phnum = usize::from(u16_at(0x38)?);
    let phoff = usize::try_from(phoff).ok()?;
    for index in 0..phnum {
        let at = phoff.checked_add(index.checked_mul(phentsize)?)?;
        let kind = u32::from_le_bytes(elf.get(at..at + 4)?.try_into().ok()?);
        if kind == PT_INTERP {
            return Some(true);
        }
    }
    Some(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dynamic_and_static_binaries_told_apart() {
        // /bin/sh on Debian is dash, dynamically linked.
        let sh = fs::read("/bin/sh").expect("/bin/sh");
        assert_eq!(has_interpreter(&sh), Some(true));
        assert_eq!(has_interpreter(b"#!/bin/sh\n"), None);
        assert_eq!(has_interpreter(b"\x7fELF\x02\x01"), None);
    }
}
