//! The one question every dataset asks the pool before it grows: may `bytes` more be dirtied?
//!
//! Volumes (`Volume`) and filesystems (`cairn-fs`'s `Filesystem`) both hold a `SpaceCheck`
//! the engine builds (`cairn-engine/src/datasets.rs`, `space_check`: one policy for both) and
//! ask it before a change that can take room, so a refusal changes nothing. The answer names
//! what refused: a `quota` or `refquota` (`SpaceRefusal::Quota`: EDQUOT to a filesystem's
//! client, `DatasetError::QuotaExceeded` for a volume, which NBD answers as ENOSPC since it
//! has no EDQUOT) or the pool's own room (`SpaceRefusal::Pool`: ENOSPC everywhere).
//! Changes that free space (deletes, trims, holes, shrinking truncation) never ask, so they
//! work at a quota and on a full pool.

use crate::DatasetError;
use std::sync::Arc;

/// What a change asks of the space check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpaceAsk {
    /// How many more bytes the change may dirty.
    pub bytes: u64,
    /// How far past a quota the change may go: 0 but for data a front end acknowledged
    /// before it could ask (cairn-fs's `Filesystem::write_acknowledged`: the kernel's
    /// writeback cache). The pool's own room is never exceeded.
    pub quota_margin_bytes: u64,
    /// Whether the check may wait (a txg sync, to make room or to count unsynced changes
    /// exactly). With `false` it must not block: a refusal then only means "not known to fit
    /// without waiting", and the caller asks again with `true`.
    pub may_wait: bool,
}

impl SpaceAsk {
    /// `bytes`, no margin past a quota, waiting allowed: what almost every change asks.
    pub fn bytes(bytes: u64) -> SpaceAsk {
        SpaceAsk {
            bytes,
            quota_margin_bytes: 0,
            may_wait: true,
        }
    }
}

/// Why a space check said no; the text says which limit, and how much was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpaceRefusal {
    /// The pool has no room (ENOSPC).
    Pool(String),
    /// A `quota` or `refquota` would be exceeded (EDQUOT; a volume's NBD client sees ENOSPC).
    Quota(String),
}

/// Asks the pool whether a change may take the room it states (`SpaceAsk`); the refusal says
/// what refused. Built by the engine, one per open dataset.
pub type SpaceCheck = Arc<dyn Fn(SpaceAsk) -> Result<(), SpaceRefusal> + Send + Sync>;

impl From<SpaceRefusal> for DatasetError {
    fn from(refusal: SpaceRefusal) -> DatasetError {
        match refusal {
            SpaceRefusal::Pool(why) => DatasetError::NoSpace(why),
            SpaceRefusal::Quota(why) => DatasetError::QuotaExceeded(why),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_device::ErrorClass;

    #[test]
    fn a_refusal_keeps_what_refused_as_its_class() {
        let pool: DatasetError = SpaceRefusal::Pool("full".into()).into();
        assert_eq!(pool.class(), ErrorClass::NoSpace);
        let quota: DatasetError = SpaceRefusal::Quota("quota of tank".into()).into();
        assert_eq!(quota.class(), ErrorClass::QuotaExceeded);
        assert!(quota.to_string().contains("quota of tank"), "{quota}");
    }
}
