//! The `sharenfs` property's value: `off`, `on`, or a comma-separated list of export options
//! (as ZFS passes its `sharenfs` to `exportfs`), parsed into [`ShareNfs`], which the NFS
//! server (cairn-frontend's `nfs`) acts on.
//!
//! Options understood: `rw` (read-write: the only access there is, so it changes nothing),
//! `root_squash` (the default: a caller with uid 0 acts as nobody) and `no_root_squash`
//! (root stays root: what a client that administers the files needs, e.g. a test suite
//! creating device nodes or giving files away; trust every root that can reach the port).
//! `on` means the defaults, as an empty list would.
//!
//! Invariant: `canonical` accepts exactly what `parse` gives a value for, and the canonical
//! form parses to the same value (the tests check both), so a stored value always has a typed
//! meaning. Options this server does not carry out (read-only shares, per-network lists such
//! as `rw=10.0.0.0/8`, Linux's other exports options) are refused by name, never ignored: a
//! share must not look safer than it is.

/// How a filesystem is shared over NFS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareNfs {
    /// Exported at all (`sharenfs` is not `off`).
    pub shared: bool,
    /// A caller with uid 0 acts as nobody (65534).
    pub root_squash: bool,
}

impl Default for ShareNfs {
    /// `off`.
    fn default() -> Self {
        ShareNfs {
            shared: false,
            root_squash: true,
        }
    }
}

/// The options a list may hold.
pub const SHARE_OPTIONS: &[&str] = &["rw", "root_squash", "no_root_squash"];

impl ShareNfs {
    /// The value of a (canonical or user-given) `sharenfs` text; the reason it is refused.
    pub fn parse(text: &str) -> Result<ShareNfs, String> {
        match text {
            "off" => return Ok(ShareNfs::default()),
            "on" => {
                return Ok(ShareNfs {
                    shared: true,
                    ..ShareNfs::default()
                });
            }
            _ => {}
        }
        let mut share = ShareNfs {
            shared: true,
            ..ShareNfs::default()
        };
        let mut squash_given: Option<&str> = None;
        for option in text.split(',') {
            let squash = match option {
                "rw" => continue,
                "root_squash" => true,
                "no_root_squash" => false,
                "" => return Err("an empty option (two commas, or one at an end)".to_string()),
                other => {
                    return Err(format!(
                        "'{other}' is not supported (on, off, or a list of {}; read-only shares and per-network lists are not supported yet)",
                        SHARE_OPTIONS.join(", ")
                    ));
                }
            };
            if let Some(earlier) = squash_given
                && earlier != option
            {
                return Err(format!("'{earlier}' and '{option}' contradict each other"));
            }
            squash_given = Some(option);
            share.root_squash = squash;
        }
        Ok(share)
    }

    /// The stored form of a user-given value: `on`, `off`, or the list without repeats, in
    /// the order given.
    pub fn canonical(text: &str) -> Result<String, String> {
        ShareNfs::parse(text)?;
        if text == "on" || text == "off" {
            return Ok(text.to_string());
        }
        let mut options: Vec<&str> = Vec::new();
        for option in text.split(',') {
            if !options.contains(&option) {
                options.push(option);
            }
        }
        Ok(options.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_off_and_option_lists() {
        let on = ShareNfs::parse("on").unwrap();
        assert!(on.shared && on.root_squash);
        let off = ShareNfs::parse("off").unwrap();
        assert!(!off.shared);
        let open = ShareNfs::parse("rw,no_root_squash").unwrap();
        assert!(open.shared && !open.root_squash);
        assert_eq!(ShareNfs::parse("root_squash").unwrap(), on);
        assert_eq!(ShareNfs::parse("rw").unwrap(), on);
        assert_eq!(
            ShareNfs::canonical("no_root_squash,rw,no_root_squash").unwrap(),
            "no_root_squash,rw"
        );
    }

    #[test]
    fn what_is_not_carried_out_is_refused() {
        for text in [
            "",
            "ro",
            "rw=10.0.0.0/8",
            "sec=krb5",
            "rw,,no_root_squash",
            "root_squash,no_root_squash",
            "ON",
            " on",
            "on,no_root_squash",
        ] {
            assert!(ShareNfs::parse(text).is_err(), "{text:?} was accepted");
            assert!(ShareNfs::canonical(text).is_err(), "{text:?} was accepted");
        }
        let err = ShareNfs::parse("ro").unwrap_err();
        assert!(
            err.contains("'ro'") && err.contains("no_root_squash"),
            "{err}"
        );
    }

    #[test]
    fn canonical_forms_parse_to_the_same_value() {
        for text in [
            "on",
            "off",
            "rw",
            "no_root_squash",
            "rw,root_squash,rw",
            "no_root_squash,no_root_squash",
        ] {
            let canonical = ShareNfs::canonical(text).unwrap();
            assert_eq!(
                ShareNfs::parse(&canonical).unwrap(),
                ShareNfs::parse(text).unwrap(),
                "{text} -> {canonical}"
            );
            assert_eq!(ShareNfs::canonical(&canonical).unwrap(), canonical);
        }
    }
}
