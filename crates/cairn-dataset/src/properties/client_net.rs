//! The clients one entry of a `sharenfs` access list (`rw=NET:NET`, `ro=NET`) names: every
//! client (`*`), or an IPv4 or IPv6 network (`10.0.0.0/8`, `[fd00::]/8`) or address
//! (`192.168.1.7`, `[::1]`), and the test whether a peer address is among them.
//!
//! Written as ZFS users write them: a network may start with `@` (Solaris' and OpenZFS'
//! network syntax, dropped in the canonical form); an IPv6 address goes in brackets
//! (`[fd00::]/8` or `[fd00::/8]`), since `:` also separates a list's entries; a list of one
//! IPv6 entry may leave them out (`ro=fd00::/8`). Host names and netgroups are refused: the
//! server resolves nothing, so what it matches is what the text says.
//!
//! Invariants: a network's address has no bits set past its prefix (`10.1.0.0/8` is refused,
//! naming `10.0.0.0/8`, rather than silently widened or narrowed); IPv6 networks inside
//! `::ffff:0:0/96` (IPv4-mapped) are refused in favour of the IPv4 form, since a peer that
//! connects over IPv6 with a mapped address is matched as the IPv4 address it is
//! (`ClientNet::contains`). The canonical text (`Display`) parses back to the same value.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The clients an access-list entry names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ClientNet {
    /// `*`: every client.
    Everyone,
    /// The addresses whose first `prefix_len` bits are `address`'s (the rest are zero).
    Net { address: IpAddr, prefix_len: u8 },
}

impl ClientNet {
    /// Whether `peer` is one of these clients. An IPv4-mapped IPv6 peer (`::ffff:a.b.c.d`, a
    /// dual-stack listener's view of an IPv4 client) is matched as its IPv4 address.
    pub fn contains(&self, peer: IpAddr) -> bool {
        let ClientNet::Net {
            address,
            prefix_len,
        } = *self
        else {
            return true;
        };
        match (address, peer.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(peer)) => {
                let mask = mask_u32(prefix_len);
                u32::from(net) & mask == u32::from(peer) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(peer)) => {
                let mask = mask_u128(prefix_len);
                u128::from(net) & mask == u128::from(peer) & mask
            }
            _ => false,
        }
    }

    /// How many leading bits decide a match: the more, the more specific the entry (`*` is
    /// less specific than any network, `/0` included). The most specific matching entry of a
    /// share's lists decides a client's access.
    pub fn specificity(&self) -> i32 {
        match self {
            ClientNet::Everyone => -1,
            ClientNet::Net { prefix_len, .. } => i32::from(*prefix_len),
        }
    }

    /// One entry as a user writes it (see the module comment); the reason it is refused.
    pub fn parse(text: &str) -> Result<ClientNet, String> {
        if text == "*" {
            return Ok(ClientNet::Everyone);
        }
        let bare = text.strip_prefix('@').unwrap_or(text);
        if bare.is_empty() {
            return Err("an empty network (two colons, or one at an end)".to_string());
        }
        // `[addr]`, `[addr]/len`, `[addr/len]`, or unbracketed `addr` / `addr/len`.
        let (address_text, prefix_text) = match bare.strip_prefix('[') {
            Some(rest) => {
                let (inside, after) = rest
                    .split_once(']')
                    .ok_or_else(|| format!("'{text}' has '[' without ']'"))?;
                match (inside.split_once('/'), after) {
                    (Some((address, prefix)), "") => (address, Some(prefix)),
                    (None, "") => (inside, None),
                    (None, after) => match after.strip_prefix('/') {
                        Some(prefix) => (inside, Some(prefix)),
                        None => return Err(not_a_network(text)),
                    },
                    (Some(_), _) => return Err(not_a_network(text)),
                }
            }
            None => match bare.split_once('/') {
                Some((address, prefix)) => (address, Some(prefix)),
                None => (bare, None),
            },
        };
        let address: IpAddr = address_text.parse().map_err(|_| not_a_network(text))?;
        if bare.starts_with('[') && address.is_ipv4() {
            return Err(format!(
                "'{text}': brackets are for IPv6 addresses (write {address} without them)"
            ));
        }
        let bits: u8 = if address.is_ipv4() { 32 } else { 128 };
        let prefix_len = match prefix_text {
            None => bits,
            Some(prefix) => match prefix.parse::<u8>() {
                Ok(len) if len <= bits && !prefix.starts_with('+') => len,
                _ => {
                    return Err(format!(
                        "'{text}': the prefix length must be a number from 0 to {bits}"
                    ));
                }
            },
        };
        let net = ClientNet::Net {
            address,
            prefix_len,
        };
        let masked = masked(address, prefix_len);
        if masked != address {
            let meant = ClientNet::Net {
                address: masked,
                prefix_len,
            };
            return Err(format!(
                "'{text}' has address bits set past its /{prefix_len} prefix (the network is {meant})"
            ));
        }
        if let IpAddr::V6(v6) = address
            && prefix_len >= 96
            && let Some(v4) = v6.to_ipv4_mapped()
        {
            let meant = ClientNet::Net {
                address: IpAddr::V4(v4),
                prefix_len: prefix_len - 96,
            };
            return Err(format!(
                "'{text}' is an IPv4-mapped IPv6 network: write it as IPv4 ({meant}), which IPv4 clients match however they connect"
            ));
        }
        Ok(net)
    }

    /// A whole list's entries (the text after `rw=` or `ro=`): split at `:` outside
    /// brackets, except that a list that is one unbracketed IPv6 network is that network.
    pub fn parse_list(text: &str) -> Result<Vec<ClientNet>, String> {
        if text.is_empty() {
            return Err("an empty list (give networks such as 10.0.0.0/8, or *)".to_string());
        }
        if !text.contains('[')
            && text.matches(':').count() >= 2
            && let Ok(net) = ClientNet::parse(text)
        {
            return Ok(vec![net]);
        }
        let mut entries = Vec::new();
        let mut depth_open = false;
        let mut start = 0;
        for (at, c) in text.char_indices() {
            match c {
                '[' => depth_open = true,
                ']' => depth_open = false,
                ':' if !depth_open => {
                    entries.push(&text[start..at]);
                    start = at + 1;
                }
                _ => {}
            }
        }
        entries.push(&text[start..]);
        entries
            .into_iter()
            .map(|entry| {
                ClientNet::parse(entry).map_err(|reason| {
                    if !text.contains('[') && text.matches(':').count() >= 2 {
                        format!(
                            "{reason}; in a list of several, IPv6 networks go in brackets ([fd00::]/8)"
                        )
                    } else {
                        reason
                    }
                })
            })
            .collect()
    }
}

fn not_a_network(text: &str) -> String {
    format!(
        "'{text}' is not an address or network (IPv4 such as 10.0.0.0/8 or 192.168.1.7, IPv6 such as [fd00::]/8 or [::1], or * for every client; host names are not resolved)"
    )
}

fn mask_u32(prefix_len: u8) -> u32 {
    u32::MAX
        .checked_shl(32 - u32::from(prefix_len))
        .unwrap_or(0)
}

fn mask_u128(prefix_len: u8) -> u128 {
    u128::MAX
        .checked_shl(128 - u32::from(prefix_len))
        .unwrap_or(0)
}

/// `address` with the bits past `prefix_len` cleared.
fn masked(address: IpAddr, prefix_len: u8) -> IpAddr {
    match address {
        IpAddr::V4(v4) => IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask_u32(prefix_len))),
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask_u128(prefix_len))),
    }
}

impl fmt::Display for ClientNet {
    /// The canonical text: `*`, `a.b.c.d` or `a.b.c.d/len`, `[v6]` or `[v6]/len` (no prefix
    /// when it covers the whole address).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientNet::Everyone => f.write_str("*"),
            ClientNet::Net {
                address: IpAddr::V4(v4),
                prefix_len: 32,
            } => write!(f, "{v4}"),
            ClientNet::Net {
                address: IpAddr::V4(v4),
                prefix_len,
            } => write!(f, "{v4}/{prefix_len}"),
            ClientNet::Net {
                address: IpAddr::V6(v6),
                prefix_len: 128,
            } => write!(f, "[{v6}]"),
            ClientNet::Net {
                address: IpAddr::V6(v6),
                prefix_len,
            } => write!(f, "[{v6}]/{prefix_len}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(text: &str) -> ClientNet {
        ClientNet::parse(text).unwrap_or_else(|err| panic!("{text}: {err}"))
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn networks_contain_their_addresses_only() {
        let ten = net("10.0.0.0/8");
        assert!(ten.contains(ip("10.0.0.0")));
        assert!(ten.contains(ip("10.255.255.255")));
        assert!(!ten.contains(ip("11.0.0.0")));
        assert!(!ten.contains(ip("9.255.255.255")));
        let host = net("127.0.0.2");
        assert!(host.contains(ip("127.0.0.2")));
        assert!(!host.contains(ip("127.0.0.3")));
        let odd = net("192.168.1.128/25");
        assert!(odd.contains(ip("192.168.1.200")));
        assert!(!odd.contains(ip("192.168.1.127")));
        let all4 = net("0.0.0.0/0");
        assert!(all4.contains(ip("1.2.3.4")));
        assert!(
            !all4.contains(ip("::1")),
            "an IPv4 network holds no IPv6 peer"
        );
        let ula = net("[fd00::]/8");
        assert!(ula.contains(ip("fd12:3456::1")));
        assert!(!ula.contains(ip("fe80::1")));
        assert!(!ula.contains(ip("10.0.0.1")));
        let all6 = net("[::]/0");
        assert!(all6.contains(ip("2001:db8::1")));
        assert!(!all6.contains(ip("10.0.0.1")));
        assert!(net("*").contains(ip("10.0.0.1")) && net("*").contains(ip("::1")));
    }

    #[test]
    fn ipv4_mapped_peers_match_ipv4_networks() {
        let ten = net("10.0.0.0/8");
        assert!(ten.contains(ip("::ffff:10.1.2.3")));
        assert!(!ten.contains(ip("::ffff:11.1.2.3")));
        assert!(net("127.0.0.1").contains(ip("::ffff:127.0.0.1")));
        // Not an IPv6 client in disguise: an IPv6 network does not take a mapped peer.
        assert!(!net("[::]/0").contains(ip("::ffff:10.1.2.3")));
    }

    #[test]
    fn forms_users_write_and_their_canonical_text() {
        for (given, canonical) in [
            ("*", "*"),
            ("10.0.0.0/8", "10.0.0.0/8"),
            ("@10.0.0.0/8", "10.0.0.0/8"),
            ("192.168.1.7", "192.168.1.7"),
            ("192.168.1.7/32", "192.168.1.7"),
            ("0.0.0.0/0", "0.0.0.0/0"),
            ("::1", "[::1]"),
            ("[::1]", "[::1]"),
            ("[::1]/128", "[::1]"),
            ("fd00::/8", "[fd00::]/8"),
            ("[fd00::]/8", "[fd00::]/8"),
            ("[fd00::/8]", "[fd00::]/8"),
            ("@[fd00:0:0::]/8", "[fd00::]/8"),
        ] {
            let parsed = net(given);
            assert_eq!(parsed.to_string(), canonical, "{given}");
            assert_eq!(net(canonical), parsed, "{given} -> {canonical}");
        }
    }

    #[test]
    fn what_is_not_a_network_is_refused_with_a_reason() {
        for (text, says) in [
            ("", "empty"),
            ("@", "empty"),
            ("host.example", "not an address"),
            ("10.0.0/8", "not an address"),
            ("10.0.0.0/33", "0 to 32"),
            ("10.0.0.0/", "0 to 32"),
            ("10.0.0.0/+8", "0 to 32"),
            ("10.0.0.0/-1", "0 to 32"),
            ("[fd00::]/129", "0 to 128"),
            ("10.1.0.0/8", "the network is 10.0.0.0/8"),
            ("[fd00::1]/8", "the network is [fd00::]/8"),
            ("[10.0.0.1]", "brackets are for IPv6"),
            ("[fd00::", "without ']'"),
            ("[fd00::]x", "not an address"),
            ("[fd00::/8]/8", "not an address"),
            ("::ffff:10.0.0.0/104", "write it as IPv4 (10.0.0.0/8)"),
            ("**", "not an address"),
        ] {
            let err = ClientNet::parse(text).expect_err(text);
            assert!(err.contains(says), "{text}: {err}");
        }
    }

    #[test]
    fn lists_split_at_colons_outside_brackets() {
        let list = ClientNet::parse_list("10.0.0.0/8:[fd00::]/8:[::1]:192.168.1.7").unwrap();
        let texts: Vec<String> = list.iter().map(ToString::to_string).collect();
        assert_eq!(texts, ["10.0.0.0/8", "[fd00::]/8", "[::1]", "192.168.1.7"]);
        assert_eq!(
            ClientNet::parse_list("fd00::/8").unwrap(),
            [net("[fd00::]/8")]
        );
        assert_eq!(ClientNet::parse_list("::1").unwrap(), [net("[::1]")]);
        assert_eq!(ClientNet::parse_list("*").unwrap(), [ClientNet::Everyone]);
        assert!(ClientNet::parse_list("").is_err());
        assert!(ClientNet::parse_list("10.0.0.0/8:").is_err());
        let err = ClientNet::parse_list("10.0.0.0/8:fd00::1").unwrap_err();
        assert!(err.contains("brackets"), "{err}");
    }

    #[test]
    fn specificity_orders_everyone_below_every_network() {
        assert!(ClientNet::Everyone.specificity() < net("0.0.0.0/0").specificity());
        assert!(net("10.0.0.0/8").specificity() < net("10.1.0.0/16").specificity());
    }
}
