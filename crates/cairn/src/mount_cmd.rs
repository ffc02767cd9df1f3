//! `cairn mount` and `cairn unmount`: filesystems mounted through FUSE live in the server that
//! owns their pool (the one process that may write it). Without a server, `mount` starts one
//! for the state directory (`start_server`), which keeps running and serving until stopped.
//!
//! Run as `mount.fuse.cairn` (a link `cairn install-mount-helper` makes where mount(8) looks),
//! the program takes mount(8)'s helper arguments (`SOURCE DIR [-n] [-v] [-o OPTIONS]`), so
//! `mount -t fuse.cairn tank/home /mnt` and /etc/fstab lines of type `fuse.cairn` work; the
//! state directory is `CAIRN_STATE_DIR`'s or the default, as for any cairn command.

use crate::context::{Context, say};
use crate::remote;
use anyhow::{Context as _, Result, anyhow, bail};
use cairn_frontend::admin::{AdminReply, AdminRequest};
use cairn_frontend::fuse::Unmounted;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long `mount` waits for a server it started to take commands.
const SERVER_START_WAIT: Duration = Duration::from_secs(30);

/// `cairn mount [-o OPTIONS] POOL/NAME [DIR]`: in the server of the state directory, which is
/// started first when none runs.
pub fn mount(ctx: &Context, dataset: &str, mountpoint: Option<&Path>, options: &str) -> Result<()> {
    let request = AdminRequest::Mount {
        dataset: dataset.to_string(),
        mountpoint: mountpoint.map(std::path::absolute).transpose()?,
        options: options.to_string(),
    };
    let reply = match remote::call_server(ctx, request)? {
        Ok(reply) => reply,
        Err(request) => {
            // A mount lives in a server: start one for this state directory.
            start_server(ctx.cache.dir())?;
            match remote::call_server(ctx, request)? {
                Ok(reply) => reply,
                Err(_) => bail!("the server started for the mount went away"),
            }
        }
    };
    match reply {
        AdminReply::Mounted(at) => {
            say!(ctx, "mounted {dataset} at {}", at.display());
            Ok(())
        }
        other => Err(remote::unexpected(&other)),
    }
}

/// `cairn unmount POOL/NAME|DIR`
pub fn unmount(ctx: &Context, target: &str) -> Result<()> {
    // A mountpoint given as a path here (a dataset name is not one).
    let target = if Path::new(target).exists() {
        std::path::absolute(target)?.display().to_string()
    } else {
        target.to_string()
    };
    match remote::call(ctx, AdminRequest::Unmount { target })? {
        AdminReply::Unmounted(Unmounted::Now { dataset }) => {
            say!(ctx, "unmounted {dataset}");
            Ok(())
        }
        AdminReply::Unmounted(Unmounted::Already { dataset }) => {
            say!(
                ctx,
                "{dataset} had been unmounted from outside cairn; forgotten as mounted"
            );
            Ok(())
        }
        other => Err(remote::unexpected(&other)),
    }
}

/// The name mount(8) runs a helper for mounts of type `fuse.cairn` by.
const MOUNT_HELPER_NAME: &str = "mount.fuse.cairn";

/// Options mount(8) and /etc/fstab use for themselves, which reach a helper and mean nothing
/// to the mount.
fn fstab_only_option(option: &str) -> bool {
    matches!(
        option,
        "defaults" | "auto" | "noauto" | "nofail" | "_netdev" | "user" | "nouser" | "users"
    ) || option.starts_with("x-")
        || option.starts_with("comment=")
}

/// The program's arguments as clap should read them: as given, unless the program was run
/// as `mount.fuse.cairn` (by mount(8)), whose arguments become `cairn mount -o OPTIONS
/// SOURCE DIR`.
pub fn helper_argv(
    argv: impl Iterator<Item = std::ffi::OsString>,
) -> Result<Vec<std::ffi::OsString>> {
    let argv: Vec<std::ffi::OsString> = argv.collect();
    let invoked_as = argv
        .first()
        .and_then(|arg0| Path::new(arg0).file_name())
        .map(|name| name.to_string_lossy().into_owned());
    if invoked_as.as_deref() != Some(MOUNT_HELPER_NAME) {
        return Ok(argv);
    }
    let mut positional = Vec::new();
    let mut options: Vec<String> = Vec::new();
    let mut rest = argv.into_iter().skip(1);
    while let Some(arg) = rest.next() {
        match arg.to_str() {
            Some("-o") => {
                let list = rest.next().ok_or_else(|| anyhow!("-o without options"))?;
                options.extend(
                    list.to_string_lossy()
                        .split(',')
                        .filter(|option| !option.is_empty() && !fstab_only_option(option))
                        .map(str::to_string),
                );
            }
            // mount(8)'s own flags: no mtab (-n), verbose (-v), sloppy (-s), fake (-f).
            Some("-n" | "-v" | "-s" | "-f") => {}
            Some("-t") => {
                rest.next();
            }
            _ => positional.push(arg),
        }
    }
    let [source, dir] = <[std::ffi::OsString; 2]>::try_from(positional).map_err(|args| {
        anyhow!("usage: {MOUNT_HELPER_NAME} POOL/NAME DIR [-o OPTIONS] (got {args:?})")
    })?;
    let mut cairn = vec!["cairn".into(), "mount".into()];
    if !options.is_empty() {
        cairn.extend(["-o".into(), options.join(",").into()]);
    }
    cairn.extend([source, dir]);
    Ok(cairn)
}

/// `cairn install-mount-helper`: links `DIR/mount.fuse.cairn` to this program.
pub fn install_helper(ctx: &Context, dir: &Path) -> Result<()> {
    let exe = std::env::current_exe().context("cannot find the cairn executable")?;
    let link = dir.join(MOUNT_HELPER_NAME);
    match std::fs::remove_file(&link) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => {
            return Err(err).with_context(|| format!("cannot replace {}", link.display()));
        }
    }
    std::os::unix::fs::symlink(&exe, &link)
        .with_context(|| format!("cannot link {} to {}", link.display(), exe.display()))?;
    say!(
        ctx,
        "installed {} (mount -t fuse.cairn POOL/NAME DIR now mounts through cairn)",
        link.display()
    );
    Ok(())
}

/// Starts `cairn serve` for `state_dir` in the background (its output in `serve.log` there)
/// and waits until it takes commands.
pub fn start_server(state_dir: &Path) -> Result<()> {
    std::fs::create_dir_all(state_dir)
        .with_context(|| format!("cannot create state directory {}", state_dir.display()))?;
    let log_path = state_dir.join("serve.log");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .with_context(|| format!("cannot open {}", log_path.display()))?;
    let exe = std::env::current_exe().context("cannot find the cairn executable")?;
    let mut child = std::process::Command::new(exe)
        .arg("--state-dir")
        .arg(state_dir)
        .arg("serve")
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("cannot start cairn serve")?;
    let socket = cairn_frontend::control::socket_path(state_dir);
    let start = Instant::now();
    while start.elapsed() < SERVER_START_WAIT {
        if socket.exists() {
            eprintln!(
                "cairn: started a server for {} (pid {}; log {}): it keeps the mount",
                state_dir.display(),
                child.id(),
                log_path.display()
            );
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            bail!(
                "the server started for the mount exited ({status}); see {}",
                log_path.display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!(
        "the server started for the mount did not come up in {} s; see {}",
        SERVER_START_WAIT.as_secs(),
        log_path.display()
    )
}
