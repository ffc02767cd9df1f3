//! Reading the memory signals: `MemoryReading` and the parsers of `/proc/meminfo`, the
//! cgroup's (v2, else v1) limit, charge and inactive page cache, and PSI.
//!
//! Invariants: nothing here panics or fails — a signal the system does not offer, or a file
//! that cannot be read or does not parse, is `None`; limits at or above
//! `CGROUP_UNLIMITED_BYTES` mean "no limit". The tightest limit among the process's cgroup and
//! its ancestors binds. How it fits: the leaf of `pressure` — `limits` and `controller` consume
//! a `MemoryReading`; `read_memory_at` takes the filesystem root so tests can fake one.

use std::fs;
use std::path::{Path, PathBuf};

/// Limits this large mean "no limit": cgroup v1 reports an unset limit as the page counter's
/// maximum (about 2^63), and nothing real comes near 2^62 bytes.
pub(super) const CGROUP_UNLIMITED_BYTES: u64 = 1 << 62;

/// One reading of the memory signals (all optional: a signal the system does not offer is
/// `None`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MemoryReading {
    /// `/proc/meminfo` `MemTotal`.
    pub ram_total_bytes: Option<u64>,
    /// `/proc/meminfo` `MemAvailable`.
    pub ram_available_bytes: Option<u64>,
    /// The tightest memory limit on this process's cgroup or an ancestor: the lower of
    /// `memory.max` and `memory.high` (v2), else `memory.limit_in_bytes` (v1). `None` when
    /// unlimited ("max") or unreadable.
    pub cgroup_limit_bytes: Option<u64>,
    /// Memory charged to the cgroup whose limit that is (`memory.current`, v1
    /// `memory.usage_in_bytes`); without a limit, to this process's own cgroup.
    pub cgroup_current_bytes: Option<u64>,
    /// Inactive page cache in that same cgroup (`memory.stat` `inactive_file`): part of the
    /// charge, but the first thing the kernel drops at the limit, so not a sign of shortage.
    pub cgroup_inactive_file_bytes: Option<u64>,
    /// PSI `some avg10` of the cgroup's `memory.pressure`, else of `/proc/pressure/memory`.
    pub psi_some_avg10_percent: Option<f64>,
}

impl MemoryReading {
    /// The cgroup's charge the kernel cannot simply drop: current less inactive page cache
    /// (what Kubernetes calls the working set). Page cache fills a cgroup up to its limit in
    /// normal operation; counting it would shrink the cache for memory nobody is short of.
    pub fn cgroup_working_set_bytes(&self) -> Option<u64> {
        let current_bytes = self.cgroup_current_bytes?;
        Some(current_bytes.saturating_sub(self.cgroup_inactive_file_bytes.unwrap_or(0)))
    }
}

/// Reads the signals from `/proc` and `/sys/fs/cgroup`. Never panics; unreadable or malformed
/// files give `None`.
pub fn read_memory() -> MemoryReading {
    read_memory_at(Path::new("/"))
}

/// `read_memory` with the filesystem root as a parameter (tests point it at a fake tree).
pub fn read_memory_at(root: &Path) -> MemoryReading {
    let meminfo = read_text(&root.join("proc/meminfo"));
    let meminfo = meminfo.as_deref().unwrap_or("");
    let membership = read_text(&root.join("proc/self/cgroup"))
        .map(|text| Membership::parse(&text))
        .unwrap_or_default();
    let v2_mount = root.join("sys/fs/cgroup");
    let v2_levels = membership.v2_path.as_deref().and_then(cgroup_levels);
    let v2 = v2_levels
        .as_deref()
        .map(|levels| cgroup_charge(&v2_mount, levels, &CGROUP_V2))
        .unwrap_or_default();
    // A v1 limit matters only on hosts without the v2 memory controller (hybrid layouts, older
    // container runtimes), where the v2 walk finds nothing.
    let charge = if v2.limit_bytes.is_none() {
        let v1 = membership
            .v1_memory_path
            .as_deref()
            .and_then(cgroup_levels)
            .map(|levels| cgroup_charge(&root.join("sys/fs/cgroup/memory"), &levels, &CGROUP_V1))
            .unwrap_or_default();
        if v1.limit_bytes.is_some() || v2.current_bytes.is_none() {
            v1
        } else {
            v2
        }
    } else {
        v2
    };
    // The cgroup's own PSI counts only this process's cgroup's stalls, including those caused
    // by an ancestor's limit; the system-wide file is the fallback.
    let psi_some_avg10_percent = v2_levels
        .as_deref()
        .and_then(|levels| {
            levels.iter().find_map(|level| {
                read_text(&v2_mount.join(level).join("memory.pressure"))
                    .and_then(|text| parse_psi_some_avg10(&text))
            })
        })
        .or_else(|| {
            read_text(&root.join("proc/pressure/memory"))
                .and_then(|text| parse_psi_some_avg10(&text))
        });
    MemoryReading {
        ram_total_bytes: parse_meminfo_bytes(meminfo, "MemTotal"),
        ram_available_bytes: parse_meminfo_bytes(meminfo, "MemAvailable"),
        cgroup_limit_bytes: charge.limit_bytes,
        cgroup_current_bytes: charge.current_bytes,
        cgroup_inactive_file_bytes: charge.inactive_file_bytes,
        psi_some_avg10_percent,
    }
}

// ---- Reading the kernel's files ----

/// A file's text, or `None` if it cannot be read (missing, permission, not UTF-8, or a
/// pressure file on a kernel booted with PSI off, which fails the read with EOPNOTSUPP).
fn read_text(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok()
}

/// The value of `key` in `/proc/meminfo` ("MemTotal:   24683656 kB"), in bytes. The first line
/// with that key decides; anything but a number followed by "kB" is malformed.
pub(super) fn parse_meminfo_bytes(text: &str, key: &str) -> Option<u64> {
    let rest = text.lines().find_map(|line| {
        let (name, rest) = line.split_once(':')?;
        (name.trim() == key).then_some(rest)
    })?;
    let mut words = rest.split_whitespace();
    let kib: u64 = words.next()?.parse().ok()?;
    match (words.next(), words.next()) {
        (Some("kB"), None) => kib.checked_mul(1024),
        _ => None,
    }
}

/// The `some avg10=` percentage of a PSI file ("some avg10=0.12 avg60=... total=...").
pub(super) fn parse_psi_some_avg10(text: &str) -> Option<f64> {
    let line = text
        .lines()
        .find(|line| line.split_whitespace().next() == Some("some"))?;
    let percent: f64 = line
        .split_whitespace()
        .find_map(|word| word.strip_prefix("avg10="))?
        .parse()
        .ok()?;
    // `parse` accepts "inf" and "NaN"; a share of time is neither.
    (0.0..=100.0).contains(&percent).then_some(percent)
}

/// A whole-file decimal number.
fn parse_u64(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// A limit file: a number, or "max" (v2's "no limit", `None` like anything unparsable).
fn parse_limit_bytes(text: &str) -> Option<u64> {
    parse_u64(text).filter(|&bytes| bytes < CGROUP_UNLIMITED_BYTES)
}

/// The value of `key` in a `memory.stat` file ("inactive_file 93679616").
fn parse_stat_value(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        if words.next()? != key {
            return None;
        }
        let value = words.next()?.parse().ok()?;
        words.next().is_none().then_some(value)
    })
}

/// This process's cgroups, from `/proc/self/cgroup`.
#[derive(Debug, Default, PartialEq)]
struct Membership {
    /// The v2 path ("0::/system.slice/cairn.service").
    v2_path: Option<String>,
    /// The v1 memory controller's path ("4:memory:/docker/abc").
    v1_memory_path: Option<String>,
}

impl Membership {
    fn parse(text: &str) -> Membership {
        let mut membership = Membership::default();
        for line in text.lines() {
            let mut fields = line.splitn(3, ':');
            let (Some(id), Some(controllers), Some(path)) =
                (fields.next(), fields.next(), fields.next())
            else {
                continue;
            };
            if id == "0" && controllers.is_empty() {
                membership.v2_path.get_or_insert_with(|| path.to_owned());
            } else if controllers.split(',').any(|name| name == "memory") {
                membership
                    .v1_memory_path
                    .get_or_insert_with(|| path.to_owned());
            }
        }
        membership
    }
}

/// The directories of a cgroup and its ancestors, relative to the hierarchy's mount, deepest
/// first and ending with the mount itself. The mount comes last because in a cgroup namespace
/// (or a container that mounts only its own subtree) it is the process's own cgroup even when
/// the path in `/proc/self/cgroup` names a directory that is not there. `None` for a path that
/// is not absolute or that climbs ("..") out of the hierarchy.
pub(super) fn cgroup_levels(path: &str) -> Option<Vec<PathBuf>> {
    let mut names = Vec::new();
    for name in path.strip_prefix('/')?.split('/') {
        match name {
            "" => {}
            "." | ".." => return None,
            name => names.push(name),
        }
    }
    Some(
        (0..=names.len())
            .rev()
            .map(|depth| names[..depth].iter().collect())
            .collect(),
    )
}

/// The files one cgroup version keeps its memory accounting in.
struct CgroupFiles {
    /// Limit files; the lowest set one binds.
    limits: &'static [&'static str],
    current: &'static str,
    /// `memory.stat` keys for inactive page cache, preferred first (v1's `total_` ones count
    /// the subtree, as the charge does).
    inactive_file_keys: &'static [&'static str],
}

const CGROUP_V2: CgroupFiles = CgroupFiles {
    limits: &["memory.max", "memory.high"],
    current: "memory.current",
    inactive_file_keys: &["inactive_file"],
};

const CGROUP_V1: CgroupFiles = CgroupFiles {
    limits: &["memory.limit_in_bytes"],
    current: "memory.usage_in_bytes",
    inactive_file_keys: &["total_inactive_file", "inactive_file"],
};

#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct CgroupCharge {
    limit_bytes: Option<u64>,
    current_bytes: Option<u64>,
    inactive_file_bytes: Option<u64>,
}

/// The charge of the level with the tightest limit (on a tie, the fuller one), or without any
/// limit the deepest level's charge. A parent nearer its larger limit than the child is to its
/// own is not reported here; the reclaim it causes shows up in the child's PSI.
fn cgroup_charge(mount: &Path, levels: &[PathBuf], files: &CgroupFiles) -> CgroupCharge {
    let mut chosen: Option<(PathBuf, CgroupCharge)> = None;
    for level in levels {
        let dir = mount.join(level);
        let limit_bytes = files
            .limits
            .iter()
            .filter_map(|name| read_text(&dir.join(name)).and_then(|text| parse_limit_bytes(&text)))
            .min();
        let current_bytes = read_text(&dir.join(files.current)).and_then(|text| parse_u64(&text));
        let candidate = CgroupCharge {
            limit_bytes,
            current_bytes,
            inactive_file_bytes: None,
        };
        let better = match &chosen {
            None => limit_bytes.is_some() || current_bytes.is_some(),
            Some((_, best)) => match (limit_bytes, best.limit_bytes) {
                (Some(limit), Some(best_limit)) => {
                    limit < best_limit
                        || (limit == best_limit && current_bytes > best.current_bytes)
                }
                (Some(_), None) => true,
                (None, _) => false,
            },
        };
        if better {
            chosen = Some((dir, candidate));
        }
    }
    let Some((dir, mut charge)) = chosen else {
        return CgroupCharge::default();
    };
    charge.inactive_file_bytes = read_text(&dir.join("memory.stat")).and_then(|text| {
        files
            .inactive_file_keys
            .iter()
            .find_map(|key| parse_stat_value(&text, key))
    });
    charge
}
