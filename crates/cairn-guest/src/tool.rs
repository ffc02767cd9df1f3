//! Running the host's tools (apt-get, dpkg-deb, depmod, modprobe, QEMU): a tool that is not
//! installed becomes [`Error::MissingTool`] naming the Debian package to install, and a failing
//! one an [`Error::Command`] with its stderr, so a test's failure says what to fix.

use crate::Error;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// The Debian package that installs `tool` (for the error of a missing one).
pub(crate) fn package_of(tool: &str) -> &'static str {
    let name = Path::new(tool)
        .file_name()
        .map_or(tool.to_string(), |name| name.to_string_lossy().into_owned());
    match name.as_str() {
        name if name.starts_with("qemu-system-") => "qemu-system-x86",
        "apt-get" => "apt",
        "dpkg-deb" => "dpkg",
        "depmod" | "modprobe" => "kmod",
        "busybox" => "busybox-static",
        "xz" => "xz-utils",
        "ganesha.nfsd" => "nfs-ganesha-vfs",
        "rpcbind" => "rpcbind",
        _ => "(unknown)",
    }
}

/// A spawn error as the crate's error: NotFound names the package.
pub(crate) fn spawn_error(tool: &str, err: std::io::Error) -> Error {
    if err.kind() == std::io::ErrorKind::NotFound {
        Error::MissingTool {
            tool: tool.to_string(),
            package: package_of(tool).to_string(),
        }
    } else {
        Error::io(format!("starting `{tool}`"), err)
    }
}

/// Runs `tool ARGS` in `dir` to completion; its stdout on success.
pub(crate) fn run(tool: &str, args: &[&str], dir: &Path) -> Result<Vec<u8>, Error> {
    let output = Command::new(tool)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|err| spawn_error(tool, err))?;
    finish(tool, args, dir, output)
}

/// `run` with `input` on the tool's stdin (written from a thread, so a tool that writes
/// before it has read everything cannot deadlock with us).
pub(crate) fn run_with_input(
    tool: &str,
    args: &[&str],
    input: &[u8],
    dir: &Path,
) -> Result<Vec<u8>, Error> {
    let mut child = Command::new(tool)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| spawn_error(tool, err))?;
    let output = std::thread::scope(|scope| {
        if let Some(mut stdin) = child.stdin.take() {
            scope.spawn(move || {
                use std::io::Write;
                // A tool that stops reading early (trailing bytes) closes the pipe: not an error.
                let _ = stdin.write_all(input);
            });
        }
        child.wait_with_output()
    })
    .map_err(|err| Error::io(format!("running `{tool}`"), err))?;
    finish(tool, args, dir, output)
}

fn finish(tool: &str, args: &[&str], dir: &Path, output: Output) -> Result<Vec<u8>, Error> {
    if output.status.success() {
        Ok(output.stdout)
    } else {
        Err(Error::Command {
            command: format!("{tool} {} (in {})", args.join(" "), dir.display()),
            status: output.status.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        })
    }
}
