//! The flags a mount is made with (`MountFlags`): what the dataset's `readonly`,
//! `devices`, `setuid` and `exec` properties ask for, `cairn mount -o` options over them,
//! and their forms for `fuser` (a new mount) and for mount(2) (a remount in place).
//!
//! Plain values without state; an unknown option is refused (`MountOptionError`), never
//! ignored. Uses no sibling: `mount.rs` applies the flags to a mount, and `mounts.rs`
//! works them out again when the properties change.

use fuser::MountOption;

/// The flags a mount is made with: the dataset's `readonly`, `devices`, `setuid` and `exec`
/// properties, as ZFS applies them, unless the mount asks otherwise (`cairn mount -o`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MountFlags {
    pub read_only: bool,
    pub no_devices: bool,
    pub no_setuid: bool,
    pub no_exec: bool,
}

impl MountFlags {
    /// The flags the dataset's properties ask for.
    pub fn of_dataset(
        pool: &cairn_engine::Pool,
        dataset: &str,
    ) -> Result<MountFlags, cairn_engine::EngineError> {
        let properties = pool.dataset_properties(dataset)?;
        Ok(MountFlags {
            read_only: properties.readonly,
            no_devices: !properties.devices,
            no_setuid: !properties.setuid,
            no_exec: !properties.exec,
        })
    }

    /// These flags with the mount options `options` (`ro`, `rw`, `dev`, `nodev`, `suid`,
    /// `nosuid`, `exec`, `noexec`, comma-separated, as mount(8) takes them) applied over
    /// them. Options that only say what mount(8) says by default (`defaults`, `auto`,
    /// `noauto`, `nofail`, `user`-less `_netdev`...) are taken and ignored.
    pub fn with_options(mut self, options: &str) -> Result<MountFlags, MountOptionError> {
        for option in options.split(',').map(str::trim).filter(|o| !o.is_empty()) {
            match option {
                "ro" => self.read_only = true,
                "rw" => self.read_only = false,
                "dev" => self.no_devices = false,
                "nodev" => self.no_devices = true,
                "suid" => self.no_setuid = false,
                "nosuid" => self.no_setuid = true,
                "exec" => self.no_exec = false,
                "noexec" => self.no_exec = true,
                "defaults" | "auto" | "noauto" | "nofail" | "_netdev" => {}
                other => return Err(MountOptionError(other.to_string())),
            }
        }
        Ok(self)
    }

    /// The flags as mount(2) takes them, for a remount of the mount's own flags.
    pub(super) fn remount_flags(self) -> libc::c_ulong {
        let mut flags = libc::MS_REMOUNT | libc::MS_BIND;
        if self.read_only {
            flags |= libc::MS_RDONLY;
        }
        if self.no_devices {
            flags |= libc::MS_NODEV;
        }
        if self.no_setuid {
            flags |= libc::MS_NOSUID;
        }
        if self.no_exec {
            flags |= libc::MS_NOEXEC;
        }
        flags
    }

    pub(super) fn mount_options(self) -> Vec<MountOption> {
        vec![
            if self.read_only {
                MountOption::RO
            } else {
                MountOption::RW
            },
            if self.no_devices {
                MountOption::NoDev
            } else {
                MountOption::Dev
            },
            if self.no_setuid {
                MountOption::NoSuid
            } else {
                MountOption::Suid
            },
            if self.no_exec {
                MountOption::NoExec
            } else {
                MountOption::Exec
            },
        ]
    }
}

/// A mount option `cairn mount -o` does not take.
#[derive(Debug, thiserror::Error)]
#[error(
    "unknown mount option '{0}' (known: ro, rw, dev, nodev, suid, nosuid, exec, noexec; the rest are properties: cairn set)"
)]
pub struct MountOptionError(pub String);
