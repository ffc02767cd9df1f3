//! In-memory indexes of the snapshot table (`snapshots.rs`), never written to disk and
//! rebuilt from the records at load, so that the table's per-command and per-txg costs stay
//! flat as a dataset's snapshots grow to 10,000:
//! - the name index, (dataset id, name) → snapshot id, behind `SnapshotTable::find`: every
//!   change of the table's snapshots (create, destroy, promote's move; load) goes through
//!   `index_snapshot` / `unindex_snapshot`, which assert it never indexes twice or misses;
//!   `name_index_agrees` compares it with a scan;
//! - the figure cache (`FigureCache`): each deadlist's share of its dataset's
//!   `usedbysnapshots` and the per-dataset sums. A deadlist whose contents change is a dirty
//!   record (it must be written), so the records dirtied since the last refresh name every
//!   share that can have changed: `changed_snapshot_bytes` recomputes those and no other.
//!   Keys a flush took before a refresh ran are kept (`note_flushed`) so none is missed. A
//!   changed origin (clone, promote) moves a dataset's floor under all its lists: the cache is
//!   then rebuilt whole.

use crate::figure_cache::FigureCache;
use crate::records::RecordKey;
use crate::snapshots::SnapshotTable;
use std::collections::BTreeSet;

impl SnapshotTable {
    /// Adds snapshot `id` of `dataset_id` named `name` to the name index.
    pub(crate) fn index_snapshot(&mut self, dataset_id: u64, name: &str, id: u64) {
        let old = self.by_name.insert((dataset_id, name.to_string()), id);
        assert!(
            old.is_none(),
            "snapshot @{name} of dataset {dataset_id} indexed twice"
        );
    }

    /// Takes snapshot `name` of `dataset_id` out of the name index.
    pub(crate) fn unindex_snapshot(&mut self, dataset_id: u64, name: &str) {
        let old = self.by_name.remove(&(dataset_id, name.to_string()));
        assert!(
            old.is_some(),
            "snapshot @{name} of dataset {dataset_id} missing from the name index"
        );
    }

    /// Asserts (debug builds: it is a scan) that the name index holds exactly the table's
    /// snapshots.
    pub(crate) fn check_name_index(&self) {
        debug_assert!(
            self.name_index_agrees(),
            "the snapshot name index disagrees"
        );
    }

    /// Whether the name index and a scan of every snapshot agree.
    pub fn name_index_agrees(&self) -> bool {
        self.by_name.len() == self.snapshots.len()
            && self.snapshots.values().all(|snapshot| {
                let info = &snapshot.info;
                self.by_name.get(&(info.dataset_id, info.name.clone())) == Some(&info.id)
            })
    }

    /// `usedbysnapshots` of each dataset whose figure may have changed since the last call,
    /// as (dataset id, bytes), a dataset left with no snapshot reported as 0; `None` when
    /// the cache was (re)built, and every dataset's figure must be read (`used_by_snapshots`).
    pub fn changed_snapshot_bytes(&mut self) -> Option<Vec<(u64, u64)>> {
        let mut keys = std::mem::take(&mut self.figures.flushed);
        keys.extend(self.dirty.iter().copied());
        let origin_changed = keys.iter().any(|key| matches!(key, RecordKey::Origin(_)));
        if !self.figures.valid || origin_changed {
            self.rebuild_figures();
            return None;
        }
        let mut datasets = BTreeSet::new();
        for key in keys {
            if !matches!(key, RecordKey::Snapshot(_) | RecordKey::Head(_)) {
                continue;
            }
            if let Some((dataset, bytes)) = self.figures.shares.remove(&key) {
                *self.figures.totals.entry(dataset).or_default() -= bytes;
                datasets.insert(dataset);
            }
            if let Some((dataset, bytes)) = self.share_of(key) {
                *self.figures.totals.entry(dataset).or_default() += bytes;
                self.figures.shares.insert(key, (dataset, bytes));
                datasets.insert(dataset);
            }
        }
        Some(
            datasets
                .into_iter()
                .map(|dataset| {
                    let bytes = self.figures.totals.get(&dataset).copied().unwrap_or(0);
                    (dataset, bytes)
                })
                .collect(),
        )
    }

    /// The figure cache from scratch (and, in debug builds, checked against the sums).
    fn rebuild_figures(&mut self) {
        let keys: Vec<RecordKey> = self
            .snapshots
            .keys()
            .map(|&id| RecordKey::Snapshot(id))
            .chain(self.heads.keys().map(|&id| RecordKey::Head(id)))
            .collect();
        let mut figures = FigureCache::built();
        for key in keys {
            if let Some((dataset, bytes)) = self.share_of(key) {
                *figures.totals.entry(dataset).or_default() += bytes;
                figures.shares.insert(key, (dataset, bytes));
            }
        }
        self.figures = figures;
    }

    /// A snapshot's or head's deadlist's share of its dataset's `usedbysnapshots` (as
    /// `used_by_snapshots` sums it); `None` if the record is gone.
    fn share_of(&self, key: RecordKey) -> Option<(u64, u64)> {
        let (dataset, list) = match key {
            RecordKey::Snapshot(id) => {
                let snapshot = self.snapshots.get(&id)?;
                (snapshot.info.dataset_id, &snapshot.deadlist)
            }
            RecordKey::Head(dataset) => (dataset, self.heads.get(&dataset)?),
            _ => return None,
        };
        let floor = self.floor_txg(dataset);
        Some((dataset, list.space_range(floor, u64::MAX).allocated_bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshots::NewSnapshot;
    use cairn_format::{BlockPointer, Dva};
    use std::collections::BTreeMap;

    /// A distinct block (by `serial`) born in `birth_txg`.
    fn bp(birth_txg: u64, serial: u64) -> BlockPointer {
        let mut bp = BlockPointer::HOLE;
        bp.birth_txg = birth_txg;
        bp.lsize = 4096;
        bp.psize = 1024;
        bp.dvas[0] = Dva {
            vdev: 0,
            offset: serial << 12,
            asize: 1024,
        };
        bp
    }

    /// What `flush` does to the dirty set, without a MOS to write into.
    fn flush_keys(table: &mut SnapshotTable) {
        let dirty = std::mem::take(&mut table.dirty);
        table.figures.note_flushed(&dirty);
    }

    /// Small deterministic generator (xorshift): the same operations every run.
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n.max(1)
        }
    }

    /// One random step on dataset 1 (a head with snapshots) or 3 (a clone of one of 1's,
    /// once made; promoted later): create, kill blocks, destroy, clone, promote.
    fn step(table: &mut SnapshotTable, rng: &mut Rng, txg: &mut u64, serial: &mut u64) {
        let dataset = if table.origin_of(3).is_some() || table.snapshots_of(3).next().is_some() {
            [1, 3][rng.below(2) as usize]
        } else {
            1
        };
        match rng.below(10) {
            0..=3 => {
                *txg += 1;
                *serial += 1;
                table
                    .create(NewSnapshot {
                        id: 1000 + *serial,
                        dataset_id: dataset,
                        name: format!("s{serial}"),
                        txg: *txg,
                        creation_ms: 0,
                        objset_bp: bp(*txg, *serial),
                        referenced_bytes: *txg << 20,
                        guid: *serial,
                    })
                    .expect("a new name");
            }
            4..=6 => {
                let prev = table.prev_snap_txg(dataset);
                if prev > 0 {
                    let blocks: Vec<BlockPointer> = (0..3)
                        .map(|_| {
                            *serial += 1;
                            bp(1 + rng.below(prev), *serial)
                        })
                        .collect();
                    table.kill(dataset, &blocks);
                }
            }
            7 | 8 => {
                let names: Vec<String> = table
                    .snapshots_of(dataset)
                    .map(|snapshot| snapshot.info.name.clone())
                    .collect();
                if !names.is_empty() {
                    let name = &names[rng.below(names.len() as u64) as usize];
                    // An origin refuses, changing nothing.
                    let _ = table.destroy(dataset, name);
                }
            }
            _ => {
                if table.origin_of(3).is_none() && table.snapshots_of(3).next().is_none() {
                    if let Some(origin) = table.newest(1).map(|snapshot| snapshot.info.id) {
                        table.add_clone(3, origin).expect("a new clone");
                    }
                } else if table.origin_of(3).is_some() {
                    table.promote(3).expect("names are unique across datasets");
                }
            }
        }
    }

    #[test]
    fn name_index_and_figure_cache_agree_with_scans_after_random_changes() {
        for seed in 1..=20u64 {
            let mut table = SnapshotTable::new();
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let (mut txg, mut serial) = (0, 0);
            let mut reported: BTreeMap<u64, u64> = BTreeMap::new();
            for round in 0..300 {
                step(&mut table, &mut rng, &mut txg, &mut serial);
                assert!(table.name_index_agrees(), "seed {seed} round {round}");
                for snapshot in table.all() {
                    let found = table.find(snapshot.info.dataset_id, &snapshot.info.name);
                    assert_eq!(found.map(|s| s.info.id), Some(snapshot.info.id));
                }
                if rng.below(3) == 0 {
                    flush_keys(&mut table);
                }
                // As the sync does: refresh, then (often) the flush takes the dirty keys.
                match table.changed_snapshot_bytes() {
                    None => {
                        for dataset in [1, 2, 3] {
                            reported.insert(dataset, table.used_by_snapshots(dataset));
                        }
                    }
                    Some(changed) => reported.extend(changed),
                }
                for dataset in [1, 2, 3] {
                    assert_eq!(
                        reported.get(&dataset).copied().unwrap_or(0),
                        table.used_by_snapshots(dataset),
                        "seed {seed} round {round}: usedbysnapshots of dataset {dataset}"
                    );
                }
            }
            assert!(table.find(1, "no-such").is_none());
        }
    }
}
