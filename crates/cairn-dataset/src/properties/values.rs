//! The typed values of the properties whose value is one of a few words: each enum's `NAMES`
//! is what the table (`mod.rs`) accepts, and `from_canonical` turns a stored canonical word
//! back into the enum.
//!
//! Invariant: `from_canonical` accepts exactly the words in `NAMES`, and `name` gives back one
//! of them (the tests check both), so a word the table accepts always has a typed meaning and
//! no layer keeps its own parser with a silent fallback. The layers that act on a value take
//! the enum (the intent log `SyncMode` and `LogBias`, the filesystem `AtimeMode`, the ARC
//! `CacheMode`, the pipeline `ChecksumAlgorithm` and `Compression`); where the enum lives in a
//! lower crate it is re-exported from here.

pub use cairn_arc::CacheMode;
pub use cairn_format::ChecksumAlgorithm;
pub use cairn_format::blkptr::Compression;

/// A property value that is one word of a fixed list.
pub trait ChoiceValue: Sized + Copy {
    /// Every word the property accepts, in the order `get` documents them.
    const NAMES: &'static [&'static str];
    /// The value a canonical word names; `None` for a word not in `NAMES`.
    fn from_canonical(word: &str) -> Option<Self>;
}

/// The `sync` property: what makes a change durable before it is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncMode {
    /// Flush, FUA, `fsync`, O_SYNC and O_DSYNC commit the intent log.
    #[default]
    Standard,
    /// Every change commits the intent log before it is acknowledged.
    Always,
    /// Nothing is committed (UNSAFE: acknowledged changes are lost if the machine stops
    /// before a txg sync).
    Disabled,
}

impl SyncMode {
    /// Whether a change commits the intent log before it returns: always under `always`,
    /// never under `disabled`, and under `standard` when its caller asked (`durable`: FUA,
    /// O_SYNC, O_DSYNC).
    #[inline]
    pub fn commits(self, durable: bool) -> bool {
        match self {
            SyncMode::Disabled => false,
            SyncMode::Always => true,
            SyncMode::Standard => durable,
        }
    }
}

impl ChoiceValue for SyncMode {
    const NAMES: &'static [&'static str] = &["standard", "always", "disabled"];
    fn from_canonical(word: &str) -> Option<Self> {
        match word {
            "standard" => Some(SyncMode::Standard),
            "always" => Some(SyncMode::Always),
            "disabled" => Some(SyncMode::Disabled),
            _ => None,
        }
    }
}

/// The `logbias` property: where a dataset's log blocks go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogBias {
    /// On the pool's log devices, if it has any.
    #[default]
    Latency,
    /// On the pool's own disks, leaving the log devices to other datasets; large sync writes
    /// are written once, in place.
    Throughput,
}

impl LogBias {
    /// Whether the dataset's log blocks may go to log devices.
    pub fn uses_log_devices(self) -> bool {
        self == LogBias::Latency
    }
}

impl ChoiceValue for LogBias {
    const NAMES: &'static [&'static str] = &["latency", "throughput"];
    fn from_canonical(word: &str) -> Option<Self> {
        match word {
            "latency" => Some(LogBias::Latency),
            "throughput" => Some(LogBias::Throughput),
            _ => None,
        }
    }
}

/// The `atime` property: when reads update a file's access time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AtimeMode {
    /// As Linux's `relatime`: only when the access time is not newer than the last
    /// modification or change, or is a day old.
    #[default]
    Relatime,
    /// Every read or directory listing.
    On,
    /// Never.
    Off,
}

impl ChoiceValue for AtimeMode {
    const NAMES: &'static [&'static str] = &["relatime", "on", "off"];
    fn from_canonical(word: &str) -> Option<Self> {
        match word {
            "relatime" => Some(AtimeMode::Relatime),
            "on" => Some(AtimeMode::On),
            "off" => Some(AtimeMode::Off),
            _ => None,
        }
    }
}

/// The `snapdir` property: whether the root of a mounted filesystem lists its control
/// directory `.cairn` (whose `snapshot` directory shows every snapshot), as ZFS's `snapdir`
/// does for `.zfs`. Hidden or not, it can be entered by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SnapdirMode {
    /// Not listed in the root; `cd .cairn` still works.
    #[default]
    Hidden,
    /// Listed in the root like any directory.
    Visible,
}

impl ChoiceValue for SnapdirMode {
    const NAMES: &'static [&'static str] = &["hidden", "visible"];
    fn from_canonical(word: &str) -> Option<Self> {
        match word {
            "hidden" => Some(SnapdirMode::Hidden),
            "visible" => Some(SnapdirMode::Visible),
            _ => None,
        }
    }
}

/// `on`/`off` properties (`readonly`, `devices`, `setuid`, `exec`).
impl ChoiceValue for bool {
    const NAMES: &'static [&'static str] = &["on", "off"];
    fn from_canonical(word: &str) -> Option<Self> {
        match word {
            "on" => Some(true),
            "off" => Some(false),
            _ => None,
        }
    }
}

/// `primarycache` and `secondarycache`.
impl ChoiceValue for CacheMode {
    const NAMES: &'static [&'static str] = &["all", "metadata", "none"];
    fn from_canonical(word: &str) -> Option<Self> {
        match word {
            "all" => Some(CacheMode::All),
            "metadata" => Some(CacheMode::Metadata),
            "none" => Some(CacheMode::None),
            _ => None,
        }
    }
}

/// `checksum`: `on` is the default algorithm, fletcher4.
impl ChoiceValue for ChecksumAlgorithm {
    const NAMES: &'static [&'static str] = &["on", "fletcher4", "blake3", "sha256"];
    fn from_canonical(word: &str) -> Option<Self> {
        match word {
            "on" => Some(ChecksumAlgorithm::Fletcher4),
            other => ChecksumAlgorithm::from_name(other),
        }
    }
}

/// `compression`: `on` is lz4. zstd is reserved in the block format and not offered.
impl ChoiceValue for Compression {
    const NAMES: &'static [&'static str] = &["off", "on", "lz4"];
    fn from_canonical(word: &str) -> Option<Self> {
        match word {
            "off" => Some(Compression::Off),
            "on" | "lz4" => Some(Compression::Lz4),
            _ => None,
        }
    }
}

/// `loglanes`: independent intent-log chains per volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogLanes(pub usize);

impl Default for LogLanes {
    fn default() -> Self {
        LogLanes(1)
    }
}

impl ChoiceValue for LogLanes {
    const NAMES: &'static [&'static str] = &["1", "2", "3", "4"];
    fn from_canonical(word: &str) -> Option<Self> {
        Self::NAMES
            .contains(&word)
            .then(|| word.parse().ok().map(LogLanes))
            .flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every listed word parses, and nothing else does.
    fn names_parse<T: ChoiceValue + std::fmt::Debug>() {
        for word in T::NAMES {
            assert!(T::from_canonical(word).is_some(), "{word} has no value");
        }
        for word in ["", "ON", "maybe", "5", "zstd", " on"] {
            if !T::NAMES.contains(&word) {
                assert!(T::from_canonical(word).is_none(), "{word} should not parse");
            }
        }
    }

    #[test]
    fn every_name_has_a_value_and_no_other_word_does() {
        names_parse::<SyncMode>();
        names_parse::<LogBias>();
        names_parse::<AtimeMode>();
        names_parse::<bool>();
        names_parse::<CacheMode>();
        names_parse::<ChecksumAlgorithm>();
        names_parse::<Compression>();
        names_parse::<LogLanes>();
        names_parse::<SnapdirMode>();
    }

    #[test]
    fn aliases_mean_what_zfs_means() {
        assert_eq!(
            ChecksumAlgorithm::from_canonical("on"),
            Some(ChecksumAlgorithm::Fletcher4)
        );
        assert_eq!(Compression::from_canonical("on"), Some(Compression::Lz4));
        assert_eq!(LogLanes::from_canonical("3"), Some(LogLanes(3)));
        assert!(LogBias::Latency.uses_log_devices());
        assert!(!LogBias::Throughput.uses_log_devices());
    }
}
