//! The one space policy of dataset writes: the `SpaceCheck` (cairn-dataset's) that every
//! volume and every filesystem asks before a change that can take room.
//!
//! Quotas first, then the pool (`judge`):
//! - *Quota*: the tightest of the dataset's `refquota` and `quota` and its ancestors' `quota`
//!   (`SpaceView::quota_room`), against what the dataset references now: its bytes as of the
//!   last synced txg plus an estimate of its unsynced txgs (`ObjectSet::space_estimate`: new
//!   blocks with their copies in whole sectors, the indirect blocks they create, dnodes;
//!   measured 0.1–0.2 % above what the sync then allocates for sequential files and new
//!   directories, 2 % above for small files, plus the indirect blocks it counts whole that the
//!   sync writes lz4-compressed), less the ask's `quota_margin_bytes`. Refused:
//!   `SpaceRefusal::Quota` (EDQUOT to a filesystem's client; `DatasetError::QuotaExceeded`
//!   for a volume, ENOSPC over NBD).
//! - *Pool*: the dirty bytes of the open txgs plus the ask against what the pool leaves the
//!   dataset, others' unused reservations held back and the dataset's own its to use
//!   (`SpaceView::pool_available_bytes`). Refused: `SpaceRefusal::Pool` (ENOSPC).
//!
//! Before refusing, an ask that may wait looks again once after making the figures exact:
//! for a quota, a txg sync if the dataset has unsynced txgs (until written out, overwrites
//! count as growth and frees as nothing; an overwrite of data at the quota is refused, as in
//! ZFS); for the pool, a txg sync and the txgs that release deferred frees (the estimate
//! counts every dirty byte as new space, and space freed in the last few txgs is not
//! reusable yet: on an idle pool nothing would sync those txgs).
//!
//! Slack: the estimate errs high while txgs are unsynced and low for the indirect blocks of
//! sparse files; callers ask with room to spare (a filesystem write for its data, an eighth
//! more and 64 KiB), so a dataset stops that much short of its quota. The check is cheap when
//! no quota applies: it never looks at the object set then.

use crate::core::reclaim_deferred;
use crate::pool::Pool;
use cairn_dataset::properties::format_size;
use cairn_dataset::space::{QuotaRoom, SpaceView};
use cairn_dataset::{SpaceAsk, SpaceCheck, SpaceRefusal};
use cairn_object::ObjectSet;
use cairn_pool::txg::TxgEngine;
use std::sync::Arc;

/// What the figures say of an ask, before any wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    Fits,
    /// A quota would be exceeded; how much it leaves, and which it is.
    Quota(QuotaRoom),
    /// The pool has no room.
    Pool,
}

/// The policy (see the module comment): `live_referenced` is what the dataset references
/// with its unsynced txgs, asked only when a quota applies; `dirty_bytes` the pool's dirty
/// data; `pool_available_bytes` the allocator's free space.
pub(crate) fn judge(
    view: &SpaceView,
    dataset: &str,
    ask: SpaceAsk,
    live_referenced: impl FnOnce() -> u64,
    dirty_bytes: u64,
    pool_available_bytes: u64,
) -> Verdict {
    // No quota on the chain: no need to look at the object set.
    if view.quota_room(dataset, 0).is_some() {
        // A margin past the quotas counts as that much less referenced.
        let referenced = live_referenced().saturating_sub(ask.quota_margin_bytes);
        if let Some(room) = view.quota_room(dataset, referenced)
            && ask.bytes > room.bytes
        {
            return Verdict::Quota(room);
        }
    }
    if dirty_bytes + ask.bytes > view.pool_available_bytes(dataset, pool_available_bytes) {
        return Verdict::Pool;
    }
    Verdict::Fits
}

/// The refusal a verdict other than `Fits` makes; `later` says why nothing was waited for.
fn refusal(pool: &str, ask: SpaceAsk, verdict: Verdict, later: &str) -> SpaceRefusal {
    match verdict {
        Verdict::Quota(room) => SpaceRefusal::Quota(format!(
            "{} of {} is {}, {} left, {} more asked",
            room.property,
            room.dataset,
            format_size(room.limit_bytes),
            format_size(room.bytes),
            format_size(ask.bytes)
        )),
        Verdict::Pool | Verdict::Fits => SpaceRefusal::Pool(format!(
            "pool '{pool}' has no room for {} more bytes{later}",
            ask.bytes
        )),
    }
}

impl Pool {
    /// The space check of dataset `name` (a volume or a filesystem, whose object set is
    /// `objset`): the module's policy over the pool's live figures.
    pub(crate) fn space_check(
        &self,
        name: &str,
        engine: &Arc<TxgEngine>,
        objset: Arc<ObjectSet>,
    ) -> SpaceCheck {
        let core = self.core.clone();
        let engine = engine.clone();
        let dataset = name.to_string();
        Arc::new(move |ask: SpaceAsk| {
            let verdict = || {
                let dirty = engine.dirty_bytes();
                let view = core.space_view.lock().clone();
                let available = core.space.lock().available_bytes();
                let live = || {
                    let live = objset.space_estimate();
                    live.used_bytes + live.unsynced_bytes
                };
                judge(&view, &dataset, ask, live, dirty, available)
            };
            let (mut quota_exact, mut pool_exact) = (false, false);
            loop {
                match verdict() {
                    Verdict::Fits => return Ok(()),
                    refused if !ask.may_wait => {
                        return Err(refusal(&core.name, ask, refused, " without a txg sync"));
                    }
                    Verdict::Quota(_) if !quota_exact => {
                        quota_exact = true;
                        if objset.space_estimate().unsynced_txgs > 0 {
                            let _ = engine.sync_now();
                        }
                    }
                    Verdict::Pool if !pool_exact => {
                        pool_exact = true;
                        let _ = engine.sync_now();
                        reclaim_deferred(&core, &engine);
                    }
                    refused => return Err(refusal(&core.name, ask, refused, "")),
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_dataset::space::DatasetSpace;

    const MIB: u64 = 1 << 20;

    /// `tank` (quota 100 MiB when `quota`) holding `tank/vol` (refquota 40 MiB when
    /// `refquota`), which references 10 MiB; no reservations.
    fn view(quota: bool, refquota: bool) -> SpaceView {
        let vol = DatasetSpace {
            refquota_bytes: if refquota { 40 * MIB } else { 0 },
            referenced_bytes: 10 * MIB,
            ..DatasetSpace::default()
        };
        let tank = DatasetSpace {
            quota_bytes: if quota { 100 * MIB } else { 0 },
            referenced_bytes: MIB,
            children_bytes: vol.charged_bytes(),
            ..DatasetSpace::default()
        };
        SpaceView {
            datasets: [("tank".to_string(), tank), ("tank/vol".to_string(), vol)].into(),
            reserved_headroom_bytes: 0,
        }
    }

    fn ask(bytes: u64, quota_margin_bytes: u64) -> SpaceAsk {
        SpaceAsk {
            bytes,
            quota_margin_bytes,
            may_wait: true,
        }
    }

    fn quota_of(verdict: Verdict) -> (&'static str, String) {
        match verdict {
            Verdict::Quota(room) => (room.property, room.dataset),
            other => panic!("not a quota: {other:?}"),
        }
    }

    #[test]
    fn a_quota_hit_is_named_quota_and_a_full_pool_pool() {
        let live = || 10 * MIB;
        let pool_free = 1 << 40;
        // Room everywhere.
        let verdict = judge(
            &view(true, true),
            "tank/vol",
            ask(MIB, 0),
            live,
            0,
            pool_free,
        );
        assert_eq!(verdict, Verdict::Fits);
        // The dataset's own refquota (30 MiB left).
        let verdict = judge(
            &view(true, true),
            "tank/vol",
            ask(31 * MIB, 0),
            live,
            0,
            pool_free,
        );
        assert_eq!(quota_of(verdict), ("refquota", "tank/vol".into()));
        // An ancestor's quota (89 MiB left): binds a volume below it too.
        let verdict = judge(
            &view(true, false),
            "tank/vol",
            ask(90 * MIB, 0),
            live,
            0,
            pool_free,
        );
        assert_eq!(quota_of(verdict), ("quota", "tank".into()));
        // The pool full, no quota anywhere: the dirty data and the ask against its room.
        let verdict = judge(
            &view(false, false),
            "tank/vol",
            ask(MIB, 0),
            live,
            0,
            MIB / 2,
        );
        assert_eq!(verdict, Verdict::Pool);
        let verdict = judge(
            &view(false, false),
            "tank/vol",
            ask(MIB, 0),
            live,
            8 * MIB,
            8 * MIB,
        );
        assert_eq!(verdict, Verdict::Pool);
        // Within a quota's room but not the pool's: the pool refuses.
        let verdict = judge(&view(true, true), "tank/vol", ask(MIB, 0), live, 0, MIB / 2);
        assert_eq!(verdict, Verdict::Pool);
        // Both: the quota is what the client is told (EDQUOT rather than ENOSPC).
        let verdict = judge(
            &view(true, true),
            "tank/vol",
            ask(31 * MIB, 0),
            live,
            0,
            MIB,
        );
        assert_eq!(quota_of(verdict), ("refquota", "tank/vol".into()));
    }

    #[test]
    fn unsynced_growth_counts_and_a_margin_goes_past_the_quota() {
        // 35 MiB referenced with the unsynced txgs: 5 MiB left of the refquota.
        let live = || 35 * MIB;
        let verdict = judge(
            &view(false, true),
            "tank/vol",
            ask(6 * MIB, 0),
            live,
            0,
            1 << 40,
        );
        assert_eq!(quota_of(verdict), ("refquota", "tank/vol".into()));
        let verdict = judge(
            &view(false, true),
            "tank/vol",
            ask(6 * MIB, 2 * MIB),
            live,
            0,
            1 << 40,
        );
        assert_eq!(verdict, Verdict::Fits);
        // The margin never makes room in the pool.
        let verdict = judge(
            &view(false, true),
            "tank/vol",
            ask(6 * MIB, 2 * MIB),
            live,
            0,
            MIB,
        );
        assert_eq!(verdict, Verdict::Pool);
    }

    #[test]
    fn without_a_quota_the_object_set_is_not_asked() {
        let live = || panic!("the object set was asked with no quota on the chain");
        let verdict = judge(
            &view(false, false),
            "tank/vol",
            ask(MIB, 0),
            live,
            0,
            1 << 40,
        );
        assert_eq!(verdict, Verdict::Fits);
    }

    #[test]
    fn a_refusal_names_the_limit_and_the_ask() {
        let room = QuotaRoom {
            bytes: MIB,
            dataset: "tank".into(),
            property: "quota",
            limit_bytes: 100 * MIB,
        };
        let quota = refusal("tank", ask(2 * MIB, 0), Verdict::Quota(room), "");
        match quota {
            SpaceRefusal::Quota(why) => assert!(why.starts_with("quota of tank is"), "{why}"),
            other => panic!("{other:?}"),
        }
        let pool = refusal("tank", ask(5, 0), Verdict::Pool, " without a txg sync");
        assert_eq!(
            pool,
            SpaceRefusal::Pool(
                "pool 'tank' has no room for 5 more bytes without a txg sync".into()
            )
        );
    }
}
