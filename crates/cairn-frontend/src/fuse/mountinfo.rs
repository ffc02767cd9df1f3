//! Dead mounts: a server killed without unmounting leaves its mounts (type `fuse.cairn`,
//! `MOUNT_TYPE`) answering ENOTCONN. They are found in /proc/self/mountinfo
//! (`dead_cairn_mounts`); the next server of the same state directory detaches those its
//! record lists (`clear_dead_cairn_mounts`), and a new mount over one detaches it first
//! (`detach`, from `mounts.rs`).
//!
//! Invariants: a live mount, this server's or another one's, is never listed, so never
//! detached; a dead mount of another state directory is left to its own server. Uses no
//! sibling; `mount.rs` gives its mounts `MOUNT_TYPE`.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The mount type of cairn's mounts (`fuser`'s subtype), as /proc/self/mountinfo shows it.
pub(super) const MOUNT_TYPE: &str = "fuse.cairn";

/// Mountpoints of cairn mounts whose server is gone (a server killed, or crashed, leaves its
/// mounts behind, answering every call with ENOTCONN). A live mount, this server's or another
/// one's, answers and is never listed.
pub fn dead_cairn_mounts() -> Vec<std::path::PathBuf> {
    let Ok(table) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    table
        .lines()
        .filter_map(parse_mountinfo_line)
        .filter(|(fstype, _)| fstype == MOUNT_TYPE)
        .map(|(_, mountpoint)| mountpoint)
        .filter(|mountpoint| statfs_errno(mountpoint) == Some(libc::ENOTCONN))
        .collect()
}

/// The error `statfs(2)` of `path` gives, if any. Asked with statfs because the kernel
/// always sends that to the server: a `stat` can be answered from the attributes it keeps
/// (for up to `ATTR_TTL`), even after the server died.
fn statfs_errno(path: &Path) -> Option<i32> {
    let path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut buf = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: a valid NUL-terminated path and a buffer of the type statfs fills.
    let status = unsafe { libc::statfs(path.as_ptr(), buf.as_mut_ptr()) };
    (status != 0).then(|| std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
}

/// Detaches the mounts of `dead_cairn_mounts` that the record at `record` (written by
/// `Mounts::keep_record` of an earlier server with the same record) lists (at server start):
/// a dead mount of another server (another state directory) is that server's to clear.
/// Returns their mountpoints.
pub fn clear_dead_cairn_mounts(record: &Path) -> Vec<std::path::PathBuf> {
    let Ok(text) = std::fs::read(record) else {
        return Vec::new();
    };
    let ours: Vec<&Path> = text
        .split(|byte| *byte == b'\n')
        .filter(|line| !line.is_empty())
        .map(|line| Path::new(OsStr::from_bytes(line)))
        .collect();
    let dead: Vec<std::path::PathBuf> = dead_cairn_mounts()
        .into_iter()
        .filter(|mountpoint| ours.contains(&mountpoint.as_path()))
        .collect();
    for mountpoint in &dead {
        detach(mountpoint);
    }
    dead
}

/// A lazy unmount: never blocks, even on a mount whose server is gone.
pub(super) fn detach(mountpoint: &Path) {
    let Ok(path) = std::ffi::CString::new(mountpoint.as_os_str().as_bytes()) else {
        return;
    };
    // SAFETY: a valid NUL-terminated path; umount2 only reads it.
    unsafe {
        libc::umount2(path.as_ptr(), libc::MNT_DETACH);
    }
}

/// (filesystem type, mountpoint) of one /proc/self/mountinfo line; the mountpoint's octal
/// escapes (`\040` for a space) decoded.
fn parse_mountinfo_line(line: &str) -> Option<(String, std::path::PathBuf)> {
    let (before, after) = line.split_once(" - ")?;
    let mountpoint = before.split(' ').nth(4)?;
    let fstype = after.split(' ').next()?;
    Some((fstype.to_string(), unescape_octal(mountpoint)))
}

fn unescape_octal(field: &str) -> std::path::PathBuf {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let escaped = bytes
            .get(index + 1..index + 4)
            .filter(|digits| {
                bytes[index] == b'\\' && digits.iter().all(|d| (b'0'..=b'7').contains(d))
            })
            .map(|digits| {
                digits
                    .iter()
                    .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'))
            });
        match escaped {
            Some(value) if value <= 0xff => {
                out.push(value as u8);
                index += 4;
            }
            _ => {
                out.push(bytes[index]);
                index += 1;
            }
        }
    }
    std::path::PathBuf::from(OsStr::from_bytes(&out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_give_type_and_unescaped_mountpoint() {
        let line = "98 29 0:52 / /srv/my\\040db rw,nosuid,nodev,relatime shared:1 - fuse.cairn tank/db rw,user_id=0,group_id=0,default_permissions,allow_other";
        let (fstype, mountpoint) = parse_mountinfo_line(line).unwrap();
        assert_eq!(fstype, "fuse.cairn");
        assert_eq!(mountpoint, Path::new("/srv/my db"));
        assert!(parse_mountinfo_line("garbage").is_none());
        assert_eq!(unescape_octal("a\\134b\\9"), Path::new("a\\b\\9"));
    }
}
