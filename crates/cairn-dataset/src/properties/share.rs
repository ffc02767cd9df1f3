//! The `sharenfs` property's value: `off`, `on`, or a comma-separated list of export options
//! (as ZFS passes its `sharenfs` to `exportfs`), parsed into [`ShareNfs`], which the NFS
//! server (cairn-frontend's `nfs`) acts on.
//!
//! Options understood:
//! - `rw=NET[:NET...]` and `ro=NET[:NET...]`: the clients (by the address they connect from,
//!   `client_net.rs`: `10.0.0.0/8`, `192.168.1.7`, `[fd00::]/8`, `*` for every client) that
//!   get read-write and read-only access. With any list, a client no list names gets no
//!   access at all; one that several entries name gets what the most specific one says
//!   (longest prefix; `*` least specific), so `rw=10.0.0.0/8,ro=10.1.0.0/16` makes 10.1/16
//!   read-only inside a read-write 10/8. One network in both lists is refused.
//! - `rw` (plain): every client read-write, as without any option; `ro` (plain): every
//!   client read-only. Neither combines with lists (the lists name everyone who has access:
//!   `rw=*` or `ro=*` says "every other client" there).
//! - `root_squash` (the default: a caller with uid 0 acts as nobody) and `no_root_squash`
//!   (root stays root: what a client that administers the files needs, e.g. a test suite
//!   creating device nodes or giving files away; trust every root that can reach the port).
//!
//! `on` means the defaults, as an empty list would. A share without lists is served to
//! loopback clients only when the server listens beyond loopback (the server's rule, in
//! cairn-frontend: AUTH_SYS trusts whatever identity a client claims, so only a list opens a
//! share to the network).
//!
//! Invariant: `canonical` accepts exactly what `parse` gives a value for, and the canonical
//! form parses to the same value (the tests check both), so a stored value always has a typed
//! meaning. Options this server does not carry out (host names, netgroups, `sec=`, Linux's
//! other exports options) are refused by name, never ignored: a share must not look safer
//! than it is.

use super::client_net::ClientNet;
use std::net::IpAddr;

/// What a client may do in a shared filesystem (ordered: more is greater).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ShareAccess {
    /// Nothing: its mounts and handles are refused.
    None,
    /// Read, but change nothing.
    ReadOnly,
    ReadWrite,
}

/// How a filesystem is shared over NFS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareNfs {
    /// Exported at all (`sharenfs` is not `off`).
    pub shared: bool,
    /// A caller with uid 0 acts as nobody (65534).
    pub root_squash: bool,
    /// Plain `ro`: every client read-only (never with lists).
    pub read_only: bool,
    /// The clients of `rw=` lists, sorted, without repeats.
    pub rw: Vec<ClientNet>,
    /// The clients of `ro=` lists, sorted, without repeats, none also in `rw`.
    pub ro: Vec<ClientNet>,
}

impl Default for ShareNfs {
    /// `off`.
    fn default() -> Self {
        ShareNfs {
            shared: false,
            root_squash: true,
            read_only: false,
            rw: Vec::new(),
            ro: Vec::new(),
        }
    }
}

/// The options a list may hold.
pub const SHARE_OPTIONS: &[&str] = &[
    "rw",
    "ro",
    "rw=NET[:NET...]",
    "ro=NET[:NET...]",
    "root_squash",
    "no_root_squash",
];

/// One option of a list, read.
enum ShareOption {
    PlainRw,
    PlainRo,
    Squash(bool),
    List(ShareAccess, Vec<ClientNet>),
}

impl ShareOption {
    fn parse(option: &str) -> Result<ShareOption, String> {
        Ok(match option {
            "rw" => ShareOption::PlainRw,
            "ro" => ShareOption::PlainRo,
            "root_squash" => ShareOption::Squash(true),
            "no_root_squash" => ShareOption::Squash(false),
            "" => return Err("an empty option (two commas, or one at an end)".to_string()),
            other => {
                let (access, list) = match other.split_once('=') {
                    Some(("rw", list)) => (ShareAccess::ReadWrite, list),
                    Some(("ro", list)) => (ShareAccess::ReadOnly, list),
                    _ => {
                        return Err(format!(
                            "'{other}' is not supported (on, off, or a list of {})",
                            SHARE_OPTIONS.join(", ")
                        ));
                    }
                };
                let nets = ClientNet::parse_list(list).map_err(|reason| {
                    let name = if access == ShareAccess::ReadWrite {
                        "rw"
                    } else {
                        "ro"
                    };
                    format!("{name}={list}: {reason}")
                })?;
                ShareOption::List(access, nets)
            }
        })
    }
}

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
        let mut plain: Option<&str> = None;
        for option in text.split(',') {
            match ShareOption::parse(option)? {
                ShareOption::Squash(squash) => {
                    if let Some(earlier) = squash_given
                        && earlier != option
                    {
                        return Err(format!("'{earlier}' and '{option}' contradict each other"));
                    }
                    squash_given = Some(option);
                    share.root_squash = squash;
                }
                ShareOption::PlainRw | ShareOption::PlainRo => {
                    if let Some(earlier) = plain
                        && earlier != option
                    {
                        return Err(format!("'{earlier}' and '{option}' contradict each other"));
                    }
                    plain = Some(option);
                    share.read_only = option == "ro";
                }
                ShareOption::List(ShareAccess::ReadWrite, nets) => share.rw.extend(nets),
                ShareOption::List(_, nets) => share.ro.extend(nets),
            }
        }
        for list in [&mut share.rw, &mut share.ro] {
            list.sort();
            list.dedup();
        }
        if let Some(plain) = plain
            && share.has_lists()
        {
            let everyone = if plain == "ro" {
                "read-only"
            } else {
                "read-write"
            };
            return Err(format!(
                "plain '{plain}' cannot go with rw=/ro= lists, which name every client that has access (write {plain}=* to give every other client {everyone} access)"
            ));
        }
        if let Some(both) = share.rw.iter().find(|net| share.ro.contains(net)) {
            return Err(format!("'{both}' is in both rw= and ro="));
        }
        Ok(share)
    }

    /// The stored form of a user-given value: `on`, `off`, or the list without repeats, in
    /// the order given, each network in its canonical text (`ClientNet`'s `Display`).
    pub fn canonical(text: &str) -> Result<String, String> {
        ShareNfs::parse(text)?;
        if text == "on" || text == "off" {
            return Ok(text.to_string());
        }
        let mut options: Vec<String> = Vec::new();
        for option in text.split(',') {
            let canonical = match ShareOption::parse(option)? {
                ShareOption::List(access, nets) => {
                    let mut texts: Vec<String> = Vec::new();
                    for net in nets {
                        let net = net.to_string();
                        if !texts.contains(&net) {
                            texts.push(net);
                        }
                    }
                    let name = if access == ShareAccess::ReadWrite {
                        "rw"
                    } else {
                        "ro"
                    };
                    format!("{name}={}", texts.join(":"))
                }
                _ => option.to_string(),
            };
            if !options.contains(&canonical) {
                options.push(canonical);
            }
        }
        Ok(options.join(","))
    }

    /// Whether `rw=` or `ro=` lists say which clients have access (a share without them is
    /// open to every client that reaches the server).
    pub fn has_lists(&self) -> bool {
        !self.rw.is_empty() || !self.ro.is_empty()
    }

    /// What a client connecting from `peer` may do: nothing if not shared; without lists,
    /// read-write (read-only under plain `ro`); with lists, what the most specific entry
    /// naming `peer` says, nothing if none does.
    pub fn access_of(&self, peer: IpAddr) -> ShareAccess {
        if !self.shared {
            return ShareAccess::None;
        }
        if !self.has_lists() {
            return if self.read_only {
                ShareAccess::ReadOnly
            } else {
                ShareAccess::ReadWrite
            };
        }
        let lists = [
            (&self.rw, ShareAccess::ReadWrite),
            (&self.ro, ShareAccess::ReadOnly),
        ];
        lists
            .into_iter()
            .flat_map(|(nets, access)| nets.iter().map(move |net| (net, access)))
            .filter(|(net, _)| net.contains(peer))
            .max_by_key(|(net, _)| net.specificity())
            .map_or(ShareAccess::None, |(_, access)| access)
    }

    /// The clients the lists name (read-write ones first), in canonical text: what MOUNT's
    /// EXPORT shows as an export's groups.
    pub fn client_texts(&self) -> Vec<String> {
        self.rw
            .iter()
            .chain(&self.ro)
            .map(ToString::to_string)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn on_off_and_option_lists() {
        let on = ShareNfs::parse("on").unwrap();
        assert!(on.shared && on.root_squash && !on.read_only && !on.has_lists());
        let off = ShareNfs::parse("off").unwrap();
        assert!(!off.shared);
        let open = ShareNfs::parse("rw,no_root_squash").unwrap();
        assert!(open.shared && !open.root_squash);
        assert_eq!(ShareNfs::parse("root_squash").unwrap(), on);
        assert_eq!(ShareNfs::parse("rw").unwrap(), on);
        assert!(ShareNfs::parse("ro,no_root_squash").unwrap().read_only);
        assert_eq!(
            ShareNfs::canonical("no_root_squash,rw,no_root_squash").unwrap(),
            "no_root_squash,rw"
        );
    }

    #[test]
    fn access_without_lists() {
        let peers = ["127.0.0.1", "10.1.2.3", "::1", "fd00::7"];
        for peer in peers {
            let peer = ip(peer);
            assert_eq!(ShareNfs::default().access_of(peer), ShareAccess::None);
            for text in ["on", "rw", "no_root_squash"] {
                let share = ShareNfs::parse(text).unwrap();
                assert_eq!(share.access_of(peer), ShareAccess::ReadWrite, "{text}");
            }
            let ro = ShareNfs::parse("ro,root_squash").unwrap();
            assert_eq!(ro.access_of(peer), ShareAccess::ReadOnly);
        }
    }

    #[test]
    fn lists_decide_by_the_most_specific_entry() {
        let share = ShareNfs::parse("rw=127.0.0.0/8,ro=10.1.0.0/16,root_squash").unwrap();
        assert!(share.has_lists() && share.root_squash);
        for (peer, access) in [
            ("127.0.0.1", ShareAccess::ReadWrite),
            ("127.9.9.9", ShareAccess::ReadWrite),
            ("::ffff:127.0.0.1", ShareAccess::ReadWrite),
            ("10.1.200.3", ShareAccess::ReadOnly),
            ("::ffff:10.1.0.1", ShareAccess::ReadOnly),
            ("10.2.0.1", ShareAccess::None),
            ("::1", ShareAccess::None),
        ] {
            assert_eq!(share.access_of(ip(peer)), access, "{peer}");
        }
        let nested =
            ShareNfs::parse("rw=10.0.0.0/8,ro=10.1.0.0/16:[fd00::]/8,rw=10.1.2.3").unwrap();
        for (peer, access) in [
            ("10.9.0.1", ShareAccess::ReadWrite),
            ("10.1.0.1", ShareAccess::ReadOnly),
            ("10.1.2.3", ShareAccess::ReadWrite),
            ("fd00::1", ShareAccess::ReadOnly),
            ("fe80::1", ShareAccess::None),
        ] {
            assert_eq!(nested.access_of(ip(peer)), access, "{peer}");
        }
        let everyone_else = ShareNfs::parse("rw=192.168.0.0/16,ro=*").unwrap();
        assert_eq!(
            everyone_else.access_of(ip("192.168.3.4")),
            ShareAccess::ReadWrite
        );
        assert_eq!(
            everyone_else.access_of(ip("8.8.8.8")),
            ShareAccess::ReadOnly
        );
        assert_eq!(everyone_else.access_of(ip("::1")), ShareAccess::ReadOnly);
        let world_then_narrow = ShareNfs::parse("ro=0.0.0.0/0,rw=*").unwrap();
        assert_eq!(
            world_then_narrow.access_of(ip("1.2.3.4")),
            ShareAccess::ReadOnly
        );
        assert_eq!(
            world_then_narrow.access_of(ip("::1")),
            ShareAccess::ReadWrite
        );
        let mut off = nested.clone();
        off.shared = false;
        assert_eq!(off.access_of(ip("10.9.0.1")), ShareAccess::None);
    }

    #[test]
    fn export_groups_name_the_listed_clients() {
        let share = ShareNfs::parse("ro=fd00::/8,rw=127.0.0.2:@10.0.0.0/8").unwrap();
        assert_eq!(
            share.client_texts(),
            ["10.0.0.0/8", "127.0.0.2", "[fd00::]/8"]
        );
        assert!(ShareNfs::parse("on").unwrap().client_texts().is_empty());
    }

    #[test]
    fn what_is_not_carried_out_is_refused() {
        for text in [
            "",
            "rw=10.0.0.0/8,ro=10.0.0.0/8",
            "rw,ro",
            "ro,rw=10.0.0.0/8",
            "rw,ro=10.0.0.0/8",
            "rw=",
            "ro=host.example",
            "rw=10.1.0.0/8",
            "rw=@netgroup",
            "rw=10.0.0.0/8:fd00::1",
            "ro=10.0.0.0/8;rw",
            "sec=krb5",
            "sec=sys",
            "rw,,no_root_squash",
            "root_squash,no_root_squash",
            "RW",
            "ON",
            " on",
            "on,no_root_squash",
            "rw = 10.0.0.0/8",
            "rx=10.0.0.0/8",
        ] {
            assert!(ShareNfs::parse(text).is_err(), "{text:?} was accepted");
            assert!(ShareNfs::canonical(text).is_err(), "{text:?} was accepted");
        }
        let err = ShareNfs::parse("sec=krb5").unwrap_err();
        assert!(
            err.contains("'sec=krb5'") && err.contains("ro=NET") && err.contains("no_root_squash"),
            "{err}"
        );
        let err = ShareNfs::parse("ro,rw=10.0.0.0/8").unwrap_err();
        assert!(err.contains("ro=*"), "{err}");
        let err = ShareNfs::parse("rw=10.0.0.0/8,ro=@10.0.0.0/8").unwrap_err();
        assert!(err.contains("'10.0.0.0/8' is in both"), "{err}");
        let err = ShareNfs::parse("rw=10.1.0.0/8").unwrap_err();
        assert!(
            err.starts_with("rw=10.1.0.0/8: ") && err.contains("10.0.0.0/8"),
            "{err}"
        );
    }

    #[test]
    fn canonical_forms_parse_to_the_same_value() {
        for (text, expected) in [
            ("on", "on"),
            ("off", "off"),
            ("rw", "rw"),
            ("ro", "ro"),
            ("no_root_squash", "no_root_squash"),
            ("rw,root_squash,rw", "rw,root_squash"),
            ("no_root_squash,no_root_squash", "no_root_squash"),
            (
                "rw=127.0.0.0/8,ro=10.1.0.0/16,root_squash",
                "rw=127.0.0.0/8,ro=10.1.0.0/16,root_squash",
            ),
            (
                "rw=@10.0.0.0/8:127.0.0.1/32:10.0.0.0/8,rw=10.0.0.0/8",
                "rw=10.0.0.0/8:127.0.0.1,rw=10.0.0.0/8",
            ),
            ("ro=fd00::/8,no_root_squash", "ro=[fd00::]/8,no_root_squash"),
            ("ro=::1,rw=*", "ro=[::1],rw=*"),
            ("rw=[fd00::/8]:[::1]/128", "rw=[fd00::]/8:[::1]"),
        ] {
            let canonical = ShareNfs::canonical(text).unwrap();
            assert_eq!(canonical, expected, "{text}");
            assert_eq!(
                ShareNfs::parse(&canonical).unwrap(),
                ShareNfs::parse(text).unwrap(),
                "{text} -> {canonical}"
            );
            assert_eq!(ShareNfs::canonical(&canonical).unwrap(), canonical);
        }
    }
}
