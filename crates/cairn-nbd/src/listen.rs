//! Creating a Unix-socket listener safely: [`bind_unix`] (Tokio) and [`bind_unix_std`] (for a
//! blocking accept loop, such as the control socket's).
//!
//! The socket must never be reachable with looser permissions than asked, even briefly, and a
//! stale socket left by a crashed server must not block a restart — but a live server's socket
//! and any non-socket file at the path must be left alone. So: a socket file nobody answers on is
//! removed; the new socket is bound inside a private (0700) directory next to the target, given
//! its mode there, then renamed into place atomically. (Setting the process umask instead would
//! race with every other thread creating files.)

use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
use std::path::Path;

use tokio::net::UnixListener;

/// Binds a Unix socket at `path` with permission bits `mode` (e.g. `0o600`). Removes a stale
/// socket file; fails with `AddrInUse` if a server is answering there and `AlreadyExists` if the
/// path is not a socket. Must be called from within a Tokio runtime.
pub fn bind_unix(path: impl AsRef<Path>, mode: u32) -> io::Result<UnixListener> {
    let std_listener = bind_unix_std(path, mode)?;
    std_listener.set_nonblocking(true)?;
    UnixListener::from_std(std_listener)
}

/// [`bind_unix`] for a blocking listener.
pub fn bind_unix_std(
    path: impl AsRef<Path>,
    mode: u32,
) -> io::Result<std::os::unix::net::UnixListener> {
    let path = path.as_ref();
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("{} is in use by a running server", path.display()),
                ));
            }
            std::fs::remove_file(path)?;
        }
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => std::env::current_dir()?,
    };
    let staging = parent.join(format!(".nbd{}.{}", std::process::id(), unique()));
    std::fs::DirBuilder::new().mode(0o700).create(&staging)?;
    let result = (|| -> io::Result<std::os::unix::net::UnixListener> {
        let tmp = staging.join("s");
        let std_listener = std::os::unix::net::UnixListener::bind(&tmp)?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode & 0o7777))?;
        std::fs::rename(&tmp, path)?;
        Ok(std_listener)
    })();
    let _ = std::fs::remove_dir_all(&staging);
    result
}

/// A per-process counter so concurrent binds in one process use distinct staging directories.
fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
