//! `cairn mount` and `cairn unmount`: filesystems mounted through FUSE live in the server that
//! owns their pool (the one process that may write it). Without a server, `mount` starts one
//! for the state directory (`start_server`), which keeps running and serving until stopped.

use crate::context::{Context, pool_of, say};
use anyhow::{Context as _, Result, anyhow, bail};
use std::path::Path;
use std::time::{Duration, Instant};

/// How long `mount` waits for a server it started to take commands.
const SERVER_START_WAIT: Duration = Duration::from_secs(30);

pub fn mount(ctx: &Context, dataset: &str, mountpoint: Option<&Path>) -> Result<()> {
    let served = ctx
        .served
        .as_ref()
        .ok_or_else(|| anyhow!("cannot mount '{dataset}': no server runs the pool"))?;
    let pool = ctx
        .served_pool(served, pool_of(dataset))
        .with_context(|| format!("cannot mount '{dataset}'"))?;
    let at = served
        .mounts
        .mount(&pool, dataset, mountpoint)
        .with_context(|| format!("cannot mount '{dataset}'"))?;
    say!(ctx, "mounted {dataset} at {}", at.display());
    Ok(())
}

pub fn unmount(ctx: &Context, target: &str) -> Result<()> {
    let Some(served) = ctx.served.as_ref() else {
        bail!("cannot unmount '{target}': no server runs (nothing cairn mounted is mounted)");
    };
    match served.mounts.unmount(target) {
        Ok(Some(cairn_frontend::fuse::Unmounted::Now { dataset })) => {
            say!(ctx, "unmounted {dataset}");
            Ok(())
        }
        Ok(Some(cairn_frontend::fuse::Unmounted::Already { dataset })) => {
            say!(
                ctx,
                "{dataset} had been unmounted from outside cairn; forgotten as mounted"
            );
            Ok(())
        }
        Ok(None) => bail!("cannot unmount '{target}': not mounted by this server"),
        Err(err) => Err(anyhow!(err).context(format!("cannot unmount '{target}' (busy?)"))),
    }
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
