//! Space accounting of datasets: USED, AVAIL and what reservations hold back.
//!
//! Two properties guarantee space, with ZFS's meanings:
//! - `refreservation` guarantees the dataset's own data (not its children's). Its unused part,
//!   `refreservation - referenced` when positive, is counted in the dataset's USED. A volume is
//!   created with `refreservation` equal to the space it can ever take (`create -V`), unless it
//!   is sparse (`create -s -V`, `refreservation=none`).
//! - `reservation` guarantees the dataset together with its descendants: the dataset is
//!   charged to its parent as `max(reservation, USED)`.
//!
//! A clone's blocks shared with its origin are charged to the origin's dataset, so here
//! `usedbydataset` is referenced less that share (`origin_shared_bytes`); for others the two
//! are equal. So `USED(d) = max(usedbydataset, refreservation) + usedbysnapshots +
//! Σ charged(child)` and
//! `charged(d) = max(reservation, USED(d))`. The pool's *reserved headroom* is what the roots
//! are charged beyond what every dataset references: space promised but not yet written. A
//! write of `n` bytes to `d` fits when the pool can hold it plus the headroom left after it,
//! i.e. when `n ≤ available - headroom + absorbable(d)`, where `absorbable(d)` is the unused
//! reservation along `d`'s chain (its own refreservation and the reservation slack of `d` and
//! every ancestor) that the write would use up instead of new promises. That same figure is
//! the dataset's AVAIL. A change of reservations (create, set) is admitted only if the new
//! headroom still fits in the pool's available space, so a promise is never made that the
//! pool cannot keep.
//!
//! Two properties limit space, with ZFS's meanings: `quota` caps USED (the dataset with its
//! snapshots, descendants and unused reservations), `refquota` caps what the dataset itself
//! references: on a dataset without children they differ by what only its snapshots hold
//! (`usedbysnapshots`, which `USED` counts) and an unused `refreservation`. A dataset's AVAIL is the least of what the
//! pool leaves it and what its quotas and its ancestors' quotas leave (`quota_room`). A limit
//! is refused below what is already used or reserved (`check_limits`).
//!
//! Everything here is a pure function of the directory (its records' `used_bytes` as of the
//! last synced txg and their properties); the engine adds the pool's free space and the dirty
//! data of the open txgs.

use crate::DatasetError;
use crate::directory::DatasetDirectory;
use std::collections::BTreeMap;

/// Space figures of one dataset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DatasetSpace {
    /// `quota`: the most USED may reach (0: none).
    pub quota_bytes: u64,
    /// `refquota`: the most the dataset may reference (0: none).
    pub refquota_bytes: u64,
    /// `reservation` and `refreservation` as set (0: none).
    pub reservation_bytes: u64,
    pub refreservation_bytes: u64,
    /// Bytes the dataset's own object set holds.
    pub referenced_bytes: u64,
    /// Of those, what a clone shares with its origin (charged to the origin's dataset).
    pub origin_shared_bytes: u64,
    /// Bytes only its snapshots hold (`usedbysnapshots`).
    pub snapshots_bytes: u64,
    /// `refreservation` not yet filled by referenced data.
    pub refreservation_unused_bytes: u64,
    /// Children's charges (each `max(reservation, USED)`).
    pub children_bytes: u64,
    /// The dataset's `reservation` not yet filled by its USED.
    pub reservation_unused_bytes: u64,
}

impl DatasetSpace {
    /// `usedbydataset`: what the dataset's head holds that no origin holds.
    pub fn dataset_bytes(&self) -> u64 {
        self.referenced_bytes
            .saturating_sub(self.origin_shared_bytes)
    }

    /// USED: usedbydataset + snapshots + unused refreservation + children.
    pub fn used_bytes(&self) -> u64 {
        self.dataset_bytes()
            + self.snapshots_bytes
            + self.refreservation_unused_bytes
            + self.children_bytes
    }

    /// What the dataset costs its parent: `max(reservation, USED)`.
    pub fn charged_bytes(&self) -> u64 {
        self.used_bytes() + self.reservation_unused_bytes
    }
}

/// How much a quota leaves a dataset, and which quota it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaRoom {
    pub bytes: u64,
    /// The dataset whose limit binds (the dataset itself or an ancestor).
    pub dataset: String,
    /// `quota` or `refquota`.
    pub property: &'static str,
    pub limit_bytes: u64,
}

/// The space view of a whole directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpaceView {
    pub datasets: BTreeMap<String, DatasetSpace>,
    /// Promised but unwritten bytes over the whole pool.
    pub reserved_headroom_bytes: u64,
}

impl SpaceView {
    /// Computes every dataset's figures, children before parents.
    pub fn of(directory: &DatasetDirectory) -> SpaceView {
        let mut names: Vec<&str> = directory.datasets.keys().map(String::as_str).collect();
        names.sort_by_key(|name| std::cmp::Reverse(depth(name)));
        let mut datasets: BTreeMap<String, DatasetSpace> = BTreeMap::new();
        // What each dataset's children charge it, summed as the children are visited (deepest
        // first, so a dataset's children are all done before it): one pass, not a scan of
        // every dataset per dataset (1,000 datasets made that a million steps per txg).
        let mut charged_by_children: BTreeMap<&str, u64> = BTreeMap::new();
        for name in names {
            let record = &directory.datasets[name];
            let refreservation = property_bytes(directory, name, "refreservation");
            let reservation = property_bytes(directory, name, "reservation");
            let children_bytes = charged_by_children.get(name).copied().unwrap_or(0);
            let mut space = DatasetSpace {
                quota_bytes: property_bytes(directory, name, "quota"),
                refquota_bytes: property_bytes(directory, name, "refquota"),
                reservation_bytes: reservation,
                refreservation_bytes: refreservation,
                referenced_bytes: record.used_bytes,
                origin_shared_bytes: record.origin_shared_bytes,
                snapshots_bytes: record.snapshots_bytes,
                refreservation_unused_bytes: refreservation
                    .saturating_sub(record.used_bytes.saturating_sub(record.origin_shared_bytes)),
                children_bytes,
                reservation_unused_bytes: 0,
            };
            space.reservation_unused_bytes = reservation.saturating_sub(space.used_bytes());
            if let Some(parent) = parent_of(name) {
                *charged_by_children.entry(parent).or_default() += space.charged_bytes();
            }
            datasets.insert(name.to_string(), space);
        }
        let charged_roots: u64 = datasets
            .iter()
            .filter(|(name, _)| parent_of(name).is_none())
            .map(|(_, space)| space.charged_bytes())
            .sum();
        let referenced_all: u64 = datasets
            .values()
            .map(|space| space.dataset_bytes() + space.snapshots_bytes)
            .sum();
        SpaceView {
            datasets,
            reserved_headroom_bytes: charged_roots.saturating_sub(referenced_all),
        }
    }

    /// Unused reservation that a write to `name` may consume: its own unused refreservation
    /// plus the reservation slack of it and each ancestor.
    pub fn absorbable_bytes(&self, name: &str) -> u64 {
        let own = self
            .datasets
            .get(name)
            .map_or(0, |space| space.refreservation_unused_bytes);
        let mut total = own;
        let mut current = Some(name);
        while let Some(dataset) = current {
            if let Some(space) = self.datasets.get(dataset) {
                total += space.reservation_unused_bytes;
            }
            current = parent_of(dataset);
        }
        total
    }

    /// AVAIL of `name` given the pool's available bytes (free minus slop): what the pool
    /// can give it without breaking others' reservations, and no more than its quotas (and
    /// its ancestors') leave.
    pub fn available_bytes(&self, name: &str, pool_available_bytes: u64) -> u64 {
        let pool = self.pool_available_bytes(name, pool_available_bytes);
        let referenced = self
            .datasets
            .get(name)
            .map_or(0, |space| space.referenced_bytes);
        match self.quota_room(name, referenced) {
            Some(room) => pool.min(room.bytes),
            None => pool,
        }
    }

    /// What the pool can give `name` without breaking others' reservations (its AVAIL but
    /// for quotas): what a pool-wide space check compares the pool's dirty bytes with.
    pub fn pool_available_bytes(&self, name: &str, pool_available_bytes: u64) -> u64 {
        (pool_available_bytes + self.absorbable_bytes(name))
            .saturating_sub(self.reserved_headroom_bytes)
            .min(pool_available_bytes)
    }

    /// The tightest quota on writes to `name` (its `refquota` and `quota`, its ancestors'
    /// `quota`) when the dataset references `live_referenced_bytes` (the view's figure
    /// plus what has not synced yet): how many more bytes it may take, and which limit says
    /// so. `None`: no quota applies. Growth not yet in the view is charged to every
    /// ancestor in full, although a reservation might absorb some of it (errs low).
    pub fn quota_room(&self, name: &str, live_referenced_bytes: u64) -> Option<QuotaRoom> {
        let own = self.datasets.get(name)?;
        let growth = live_referenced_bytes.saturating_sub(own.referenced_bytes);
        let mut tightest: Option<QuotaRoom> = None;
        let mut consider = |bytes: u64, dataset: &str, property: &'static str, limit: u64| {
            if tightest.as_ref().is_none_or(|room| bytes < room.bytes) {
                tightest = Some(QuotaRoom {
                    bytes,
                    dataset: dataset.to_string(),
                    property,
                    limit_bytes: limit,
                });
            }
        };
        if own.refquota_bytes > 0 {
            let room = own.refquota_bytes.saturating_sub(live_referenced_bytes);
            consider(room, name, "refquota", own.refquota_bytes);
        }
        if own.quota_bytes > 0 {
            // Writes fill the unused refreservation before USED grows.
            let used = live_referenced_bytes + own.children_bytes;
            consider(
                own.quota_bytes.saturating_sub(used),
                name,
                "quota",
                own.quota_bytes,
            );
        }
        let mut current = parent_of(name);
        while let Some(ancestor) = current {
            if let Some(space) = self.datasets.get(ancestor)
                && space.quota_bytes > 0
            {
                let room = space
                    .quota_bytes
                    .saturating_sub(space.used_bytes() + growth);
                consider(room, ancestor, "quota", space.quota_bytes);
            }
            current = parent_of(ancestor);
        }
        tightest
    }

    /// Refuses limits on `name` that contradict each other or what it already holds (as
    /// ZFS: a quota below USED or below the reservation, a refquota below what it
    /// references or below the refreservation).
    pub fn check_limits(&self, name: &str) -> Result<(), DatasetError> {
        let Some(space) = self.datasets.get(name) else {
            return Ok(());
        };
        let size = crate::properties::format_size;
        let (reservation, refreservation) = (space.reservation_bytes, space.refreservation_bytes);
        let refuse = |property: &str, what: String| {
            Err(DatasetError::PropertyNotAllowed {
                name: property.to_string(),
                reason: format!("of {name}: {what}"),
            })
        };
        if space.quota_bytes > 0 {
            if space.quota_bytes < space.used_bytes() {
                return refuse(
                    "quota",
                    format!(
                        "{} is less than what the dataset uses ({})",
                        size(space.quota_bytes),
                        size(space.used_bytes())
                    ),
                );
            }
            if space.quota_bytes < reservation {
                return refuse(
                    "quota",
                    format!(
                        "{} is less than the reservation ({})",
                        size(space.quota_bytes),
                        size(reservation)
                    ),
                );
            }
            if space.quota_bytes < refreservation {
                return refuse(
                    "quota",
                    format!(
                        "{} is less than the refreservation ({})",
                        size(space.quota_bytes),
                        size(refreservation)
                    ),
                );
            }
        }
        if space.refquota_bytes > 0 {
            if space.refquota_bytes < space.referenced_bytes {
                return refuse(
                    "refquota",
                    format!(
                        "{} is less than what the dataset references ({})",
                        size(space.refquota_bytes),
                        size(space.referenced_bytes)
                    ),
                );
            }
            if space.refquota_bytes < refreservation {
                return refuse(
                    "refquota",
                    format!(
                        "{} is less than the refreservation ({})",
                        size(space.refquota_bytes),
                        size(refreservation)
                    ),
                );
            }
        }
        Ok(())
    }

    /// Refuses a directory whose promises exceed what the pool can hold.
    pub fn check_fits(&self, pool_available_bytes: u64) -> Result<(), DatasetError> {
        if self.reserved_headroom_bytes > pool_available_bytes {
            return Err(DatasetError::NoSpace(format!(
                "reservations would hold back {} but the pool has {} available",
                crate::properties::format_size(self.reserved_headroom_bytes),
                crate::properties::format_size(pool_available_bytes)
            )));
        }
        Ok(())
    }
}

fn depth(name: &str) -> usize {
    name.matches('/').count()
}

fn parent_of(name: &str) -> Option<&str> {
    name.rsplit_once('/').map(|(parent, _)| parent)
}

fn property_bytes(directory: &DatasetDirectory, name: &str, property: &str) -> u64 {
    directory
        .property(name, property)
        .ok()
        .and_then(|(value, _)| value.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DatasetKind;
    use crate::directory::creation_properties;
    use proptest::prelude::*;

    const MIB: u64 = 1 << 20;

    fn directory(volumes: &[(&str, u64, u64)]) -> DatasetDirectory {
        let mut dir = DatasetDirectory::default();
        dir.insert("tank", DatasetKind::Filesystem, 1, BTreeMap::new())
            .unwrap();
        for &(name, refreservation, used) in volumes {
            let props = creation_properties(
                DatasetKind::Volume,
                &[("refreservation".into(), refreservation.to_string())],
            )
            .unwrap();
            dir.insert(name, DatasetKind::Volume, 2, props)
                .unwrap()
                .used_bytes = used;
        }
        dir
    }

    #[test]
    fn unused_refreservation_counts_in_used_and_holds_back_others() {
        let dir = directory(&[
            ("tank/thick", 100 * MIB, 10 * MIB),
            ("tank/sparse", 0, 5 * MIB),
        ]);
        let view = SpaceView::of(&dir);
        let thick = view.datasets["tank/thick"];
        assert_eq!(thick.used_bytes(), 100 * MIB);
        assert_eq!(thick.referenced_bytes, 10 * MIB);
        assert_eq!(view.datasets["tank"].used_bytes(), 105 * MIB);
        assert_eq!(view.reserved_headroom_bytes, 90 * MIB);
        // 200 MiB free in the pool: the sparse volume sees what is not promised, the thick one
        // sees that plus its own promise.
        assert_eq!(view.available_bytes("tank/sparse", 200 * MIB), 110 * MIB);
        assert_eq!(view.available_bytes("tank/thick", 200 * MIB), 200 * MIB);
        assert!(view.check_fits(90 * MIB).is_ok());
        assert!(view.check_fits(90 * MIB - 1).is_err());
    }

    #[test]
    fn a_filled_refreservation_holds_nothing_back() {
        let dir = directory(&[("tank/full", 10 * MIB, 12 * MIB)]);
        let view = SpaceView::of(&dir);
        assert_eq!(view.reserved_headroom_bytes, 0);
        assert_eq!(view.datasets["tank/full"].used_bytes(), 12 * MIB);
    }

    #[test]
    fn reservation_covers_descendants_and_is_charged_to_the_parent() {
        let mut dir = directory(&[]);
        dir.insert("tank/fs", DatasetKind::Filesystem, 2, BTreeMap::new())
            .unwrap();
        dir.set_property("tank/fs", "reservation", "50M").unwrap();
        let props = creation_properties(
            DatasetKind::Volume,
            &[("refreservation".into(), "0".into())],
        )
        .unwrap();
        dir.insert("tank/fs/v", DatasetKind::Volume, 3, props)
            .unwrap()
            .used_bytes = 20 * MIB;
        let view = SpaceView::of(&dir);
        assert_eq!(view.datasets["tank/fs"].used_bytes(), 20 * MIB);
        assert_eq!(view.datasets["tank/fs"].charged_bytes(), 50 * MIB);
        assert_eq!(view.datasets["tank"].used_bytes(), 50 * MIB);
        assert_eq!(view.reserved_headroom_bytes, 30 * MIB);
        // A write below tank/fs may use the reservation's slack; elsewhere it is held back.
        assert_eq!(view.absorbable_bytes("tank/fs/v"), 30 * MIB);
        assert_eq!(view.available_bytes("tank/fs/v", 100 * MIB), 100 * MIB);
        assert_eq!(view.available_bytes("tank", 100 * MIB), 70 * MIB);
    }

    #[test]
    fn quotas_bound_avail_along_the_chain_and_refuse_contradictions() {
        let mut dir = directory(&[]);
        dir.insert("tank/home", DatasetKind::Filesystem, 2, BTreeMap::new())
            .unwrap()
            .used_bytes = 30 * MIB;
        dir.set_property("tank/home", "quota", "100M").unwrap();
        dir.set_property("tank/home", "refquota", "60M").unwrap();
        let view = SpaceView::of(&dir);
        // refquota binds first: 60 - 30.
        let room = view.quota_room("tank/home", 30 * MIB).unwrap();
        assert_eq!((room.bytes, room.property), (30 * MIB, "refquota"));
        assert_eq!(view.available_bytes("tank/home", 500 * MIB), 30 * MIB);
        // Unsynced growth counts; a pool with less room than the quota wins.
        assert_eq!(
            view.quota_room("tank/home", 50 * MIB).unwrap().bytes,
            10 * MIB
        );
        assert_eq!(view.available_bytes("tank/home", 20 * MIB), 20 * MIB);
        // An ancestor's quota binds a child, counting the child's unsynced growth.
        dir.set_property("tank", "quota", "40M").unwrap();
        let view = SpaceView::of(&dir);
        let room = view.quota_room("tank/home", 35 * MIB).unwrap();
        assert_eq!((room.bytes, room.dataset.as_str()), (5 * MIB, "tank"));
        assert!(view.check_limits("tank/home").is_ok());
        // Below what is used, or below a reservation: refused.
        dir.set_property("tank/home", "quota", "20M").unwrap();
        assert!(SpaceView::of(&dir).check_limits("tank/home").is_err());
        dir.set_property("tank/home", "quota", "none").unwrap();
        dir.set_property("tank/home", "reservation", "80M").unwrap();
        assert!(SpaceView::of(&dir).check_limits("tank/home").is_ok());
        dir.set_property("tank/home", "quota", "70M").unwrap();
        assert!(SpaceView::of(&dir).check_limits("tank/home").is_err());
        dir.set_property("tank/home", "quota", "none").unwrap();
        dir.set_property("tank/home", "refreservation", "61M")
            .unwrap();
        assert!(SpaceView::of(&dir).check_limits("tank/home").is_err());
        // No quota anywhere: no room figure.
        let plain = directory(&[("tank/v", 0, MIB)]);
        assert!(SpaceView::of(&plain).quota_room("tank/v", MIB).is_none());
    }

    proptest! {
        /// Headroom is never less than any chain's absorbable slack, and AVAIL never exceeds
        /// the pool's available space.
        #[test]
        fn headroom_bounds_every_chain(
            volumes in proptest::collection::vec((0u64..1000, 0u64..1000), 1..6),
            pool_available in 0u64..5000,
        ) {
            let named: Vec<(String, u64, u64)> = volumes
                .iter()
                .enumerate()
                .map(|(i, &(res, used))| (format!("tank/v{i}"), res * MIB, used * MIB))
                .collect();
            let borrowed: Vec<(&str, u64, u64)> =
                named.iter().map(|(n, r, u)| (n.as_str(), *r, *u)).collect();
            let view = SpaceView::of(&directory(&borrowed));
            let expected: u64 = named.iter().map(|(_, r, u)| r.saturating_sub(*u)).sum();
            prop_assert_eq!(view.reserved_headroom_bytes, expected);
            for (name, _, _) in &named {
                prop_assert!(view.absorbable_bytes(name) <= view.reserved_headroom_bytes);
                prop_assert!(view.available_bytes(name, pool_available * MIB) <= pool_available * MIB);
            }
        }
    }
}
